"""Agent-side types: tools the agent can execute, the loop's context, the options of an agent's
runs and the loop's configuration, and the contexts and results of the tool hooks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeAlias

import msgspec

from agent_core.abort import AbortSignal
from agent_core.llm import Model, StreamOptions
from agent_core.messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ToolCall,
    ToolResultMessage,
)

ToolExecutionMode: TypeAlias = Literal["sequential", "parallel"]
QueueMode: TypeAlias = Literal["all", "one-at-a-time"]


class AgentToolResult(msgspec.Struct, kw_only=True, dict=True):
    """What a tool returns. `terminate=True` on every result of a batch ends the run after it."""

    content: list[TextContent | ImageContent] = msgspec.field(default_factory=list)
    details: Any = None
    terminate: bool | None = None


ToolUpdateCallback: TypeAlias = Callable[[AgentToolResult], None]
ToolExecute: TypeAlias = Callable[
    [str, Any, AbortSignal | None, ToolUpdateCallback | None], Awaitable[AgentToolResult]
]


class AgentTool(msgspec.Struct, kw_only=True, dict=True):
    """A tool the agent can run: `execute(tool_call_id, params, signal, on_update)`.

    `parameters` is a JSON Schema; arguments are validated (with pi's coercions) before
    `execute` sees them. `prepare_arguments` may rewrite raw arguments first (legacy shapes).
    `execution_mode="sequential"` forces the whole batch containing a call to it to run in order.
    """

    name: str
    label: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecute
    prepare_arguments: Callable[[Any], Any] | None = None
    execution_mode: ToolExecutionMode | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Free-form facts about the tool for the layers that wrap it (required scope, origin)."""


class AgentContext(msgspec.Struct, kw_only=True, dict=True):
    system_prompt: str = ""
    messages: list[AgentMessage] = msgspec.field(default_factory=list)
    tools: list[AgentTool] | None = None


class BeforeToolCallContext(msgspec.Struct, kw_only=True, dict=True):
    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    context: AgentContext


class BeforeToolCallResult(msgspec.Struct, kw_only=True, dict=True):
    block: bool = False
    reason: str | None = None


class AfterToolCallContext(msgspec.Struct, kw_only=True, dict=True):
    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    result: AgentToolResult
    is_error: bool
    context: AgentContext


class AfterToolCallResult(msgspec.Struct, kw_only=True, dict=True):
    """Field-by-field overrides of a finished tool's result (``None`` keeps the original)."""

    content: list[TextContent | ImageContent] | None = None
    details: Any = None
    is_error: bool | None = None
    terminate: bool | None = None


class ShouldStopAfterTurnContext(msgspec.Struct, kw_only=True, dict=True):
    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    context: AgentContext
    new_messages: list[AgentMessage]


ConvertToLlm: TypeAlias = Callable[[list[AgentMessage]], "Sequence[Message] | Awaitable[Sequence[Message]]"]
TransformContext: TypeAlias = Callable[
    [list[AgentMessage], AbortSignal | None], Awaitable[list[AgentMessage]]
]
GetApiKey: TypeAlias = Callable[[str], str | Awaitable[str | None] | None]
"""provider name -> the API key for this call (None keeps `stream.api_key`)."""
ShouldStopAfterTurn: TypeAlias = Callable[[ShouldStopAfterTurnContext], bool | Awaitable[bool]]
BeforeToolCallHook: TypeAlias = Callable[
    [BeforeToolCallContext, AbortSignal | None], Awaitable[BeforeToolCallResult | None]
]
AfterToolCallHook: TypeAlias = Callable[
    [AfterToolCallContext, AbortSignal | None], Awaitable[AfterToolCallResult | None]
]
MessageSource: TypeAlias = Callable[[], Awaitable[list[AgentMessage]]]
RefreshTools: TypeAlias = Callable[[], "Sequence[AgentTool] | Awaitable[Sequence[AgentTool] | None] | None"]
"""-> the tools for the turn about to start and the later ones, or None to keep the current ones."""


def default_convert_to_llm(messages: list[AgentMessage]) -> list[Message]:
    """Keep the three LLM roles; drop application messages."""
    return [m for m in messages if m.role in ("user", "assistant", "toolResult")]  # type: ignore[misc]


class AgentOptions(msgspec.Struct, kw_only=True, dict=True):
    """How an agent's runs treat the model and the tools: the hooks and the stream settings.

    This is the one place these options live. An `Agent` keeps one (`agent.options`; changes apply
    from the next run) and gives each run a shallow copy; the loop reads it from
    `AgentLoopConfig.options`. For every model call the loop turns `stream` into the call's
    `StreamOptions` with `signal` replaced by the run's abort signal and `api_key` by what
    `get_api_key` returns (when it returns a key). Under an `Agent`, `stream.reasoning` is set
    from `state.thinking_level` at the start of each run.
    """

    convert_to_llm: ConvertToLlm = default_convert_to_llm
    transform_context: TransformContext | None = None
    get_api_key: GetApiKey | None = None
    should_stop_after_turn: ShouldStopAfterTurn | None = None
    tool_execution: ToolExecutionMode = "parallel"
    before_tool_call: BeforeToolCallHook | None = None
    after_tool_call: AfterToolCallHook | None = None
    refresh_tools: RefreshTools | None = None
    """Asked before every turn but the first of a run (an addition to pi, whose tools are fixed
    for a run): a host whose tools change while a run goes on (a tool server announcing a new
    list) gives the model the new ones from the next turn."""
    stream: StreamOptions = msgspec.field(default_factory=StreamOptions)


class AgentLoopConfig(msgspec.Struct, kw_only=True, dict=True):
    """Configuration of one loop run: the model, the options, and where the messages queued while
    the run goes on come from (polled after each turn; None means never any)."""

    model: Model
    options: AgentOptions = msgspec.field(default_factory=AgentOptions)
    get_steering_messages: MessageSource | None = None
    get_follow_up_messages: MessageSource | None = None
