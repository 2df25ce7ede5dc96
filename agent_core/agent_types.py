"""Agent-side types: tools the agent can execute, the loop's context and configuration, and the
contexts and results of the tool hooks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from agent_core.abort import AbortSignal
from agent_core.llm import Model, ReasoningLevel
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

MaybeAwaitable: TypeAlias = Any  # T | Awaitable[T]; resolved with `agent_core._util.resolve`


@dataclass(kw_only=True)
class AgentToolResult:
    """What a tool returns. `terminate=True` on every result of a batch ends the run after it."""

    content: list[TextContent | ImageContent] = field(default_factory=list)
    details: Any = None
    terminate: bool | None = None


ToolUpdateCallback: TypeAlias = Callable[[AgentToolResult], None]
ToolExecute: TypeAlias = Callable[
    [str, Any, AbortSignal | None, ToolUpdateCallback | None], Awaitable[AgentToolResult]
]


@dataclass(kw_only=True)
class AgentTool:
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
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form facts about the tool for the layers that wrap it (required scope, origin)."""


@dataclass(kw_only=True)
class AgentContext:
    system_prompt: str = ""
    messages: list[AgentMessage] = field(default_factory=list)
    tools: list[AgentTool] | None = None


@dataclass(kw_only=True)
class BeforeToolCallContext:
    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    context: AgentContext


@dataclass(kw_only=True)
class BeforeToolCallResult:
    block: bool = False
    reason: str | None = None


@dataclass(kw_only=True)
class AfterToolCallContext:
    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    result: AgentToolResult
    is_error: bool
    context: AgentContext


@dataclass(kw_only=True)
class AfterToolCallResult:
    """Field-by-field overrides of a finished tool's result (``None`` keeps the original)."""

    content: list[TextContent | ImageContent] | None = None
    details: Any = None
    is_error: bool | None = None
    terminate: bool | None = None


@dataclass(kw_only=True)
class ShouldStopAfterTurnContext:
    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    context: AgentContext
    new_messages: list[AgentMessage]


ConvertToLlm: TypeAlias = Callable[[list[AgentMessage]], "Sequence[Message] | Awaitable[Sequence[Message]]"]
TransformContext: TypeAlias = Callable[
    [list[AgentMessage], AbortSignal | None], Awaitable[list[AgentMessage]]
]


def default_convert_to_llm(messages: list[AgentMessage]) -> list[Message]:
    """Keep the three LLM roles; drop application messages."""
    return [m for m in messages if m.role in ("user", "assistant", "toolResult")]  # type: ignore[misc]


@dataclass(kw_only=True)
class AgentLoopConfig:
    """Configuration of one loop run. Stream options are passed to the stream function as is."""

    model: Model
    convert_to_llm: ConvertToLlm = default_convert_to_llm
    transform_context: TransformContext | None = None
    get_api_key: Callable[[str], str | Awaitable[str | None] | None] | None = None
    get_steering_messages: Callable[[], Awaitable[list[AgentMessage]]] | None = None
    get_follow_up_messages: Callable[[], Awaitable[list[AgentMessage]]] | None = None
    should_stop_after_turn: Callable[[ShouldStopAfterTurnContext], bool | Awaitable[bool]] | None = None
    tool_execution: ToolExecutionMode = "parallel"
    before_tool_call: (
        Callable[[BeforeToolCallContext, AbortSignal | None], Awaitable[BeforeToolCallResult | None]] | None
    ) = None
    after_tool_call: (
        Callable[[AfterToolCallContext, AbortSignal | None], Awaitable[AfterToolCallResult | None]] | None
    ) = None
    # stream options
    reasoning: ReasoningLevel | None = None
    api_key: str | None = None
    session_id: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_retries: int | None = None
    max_retry_delay_ms: int | None = None
    timeout_ms: int | None = None
    headers: dict[str, str] | None = None
    on_payload: Callable[[dict[str, Any], Model], None] | None = None
    on_event: Callable[[], None] | None = None
