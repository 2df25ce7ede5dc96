"""Event types: the 12 `AssistantMessageEvent` variants (provider side) and the 10 `AgentEvent`
variants (loop side). Both are discriminated by `type`; JSON keys are camelCase.

Events are `WireStruct`s, built once per streamed delta. The `partial` of a provider event is the
provider's message as it stood when the event was pushed; providers may share one message between
events and keep changing it (as pi's do), so a consumer that keeps a `partial` beyond handling the
event must copy it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

from agent_core._wire import WireStruct, always
from agent_core.messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage

# --- provider stream events -------------------------------------------------------------------


class _AssistantEvent(WireStruct, tag_field="type"):
    """Base of the provider stream events, tagged by `type`."""


class StartEvent(_AssistantEvent, tag="start", kw_only=True):
    type: ClassVar[Literal["start"]] = "start"
    partial: AssistantMessage


class TextStartEvent(_AssistantEvent, tag="text_start", kw_only=True):
    type: ClassVar[Literal["text_start"]] = "text_start"
    content_index: int
    partial: AssistantMessage


class TextDeltaEvent(_AssistantEvent, tag="text_delta", kw_only=True):
    type: ClassVar[Literal["text_delta"]] = "text_delta"
    content_index: int
    delta: str
    partial: AssistantMessage


class TextEndEvent(_AssistantEvent, tag="text_end", kw_only=True):
    type: ClassVar[Literal["text_end"]] = "text_end"
    content_index: int
    content: str
    partial: AssistantMessage


class ThinkingStartEvent(_AssistantEvent, tag="thinking_start", kw_only=True):
    type: ClassVar[Literal["thinking_start"]] = "thinking_start"
    content_index: int
    partial: AssistantMessage


class ThinkingDeltaEvent(_AssistantEvent, tag="thinking_delta", kw_only=True):
    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"
    content_index: int
    delta: str
    partial: AssistantMessage


class ThinkingEndEvent(_AssistantEvent, tag="thinking_end", kw_only=True):
    type: ClassVar[Literal["thinking_end"]] = "thinking_end"
    content_index: int
    content: str
    partial: AssistantMessage


class ToolCallStartEvent(_AssistantEvent, tag="toolcall_start", kw_only=True):
    type: ClassVar[Literal["toolcall_start"]] = "toolcall_start"
    content_index: int
    partial: AssistantMessage


class ToolCallDeltaEvent(_AssistantEvent, tag="toolcall_delta", kw_only=True):
    type: ClassVar[Literal["toolcall_delta"]] = "toolcall_delta"
    content_index: int
    delta: str
    partial: AssistantMessage


class ToolCallEndEvent(_AssistantEvent, tag="toolcall_end", kw_only=True):
    type: ClassVar[Literal["toolcall_end"]] = "toolcall_end"
    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage


class DoneEvent(_AssistantEvent, tag="done", kw_only=True):
    type: ClassVar[Literal["done"]] = "done"
    reason: Literal["stop", "length", "toolUse"]
    message: AssistantMessage


class ErrorEvent(_AssistantEvent, tag="error", kw_only=True):
    type: ClassVar[Literal["error"]] = "error"
    reason: Literal["aborted", "error"]
    error: AssistantMessage


AssistantMessageEvent: TypeAlias = (
    StartEvent
    | TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | DoneEvent
    | ErrorEvent
)


def completing_event(message: AssistantMessage) -> DoneEvent | ErrorEvent:
    """The event that ends a stream with `message`: `error` when it stopped with ``"error"`` or
    ``"aborted"``, else `done`."""
    reason = message.stop_reason
    if reason == "error" or reason == "aborted":  # noqa: PLR1714 (`in` would not narrow the type)
        return ErrorEvent(reason=reason, error=message)
    return DoneEvent(reason=reason, message=message)


# --- agent loop events ------------------------------------------------------------------------


class AgentToolResultData(WireStruct, kw_only=True):
    """The `result` carried by `tool_execution_end` (and `partial_result` of updates)."""

    content: list[Any] = always(list)
    details: Any = None
    terminate: bool | None = None


class _AgentEvent(WireStruct, tag_field="type"):
    """Base of the loop's events, tagged by `type`."""


class AgentStartEvent(_AgentEvent, tag="agent_start", kw_only=True):
    type: ClassVar[Literal["agent_start"]] = "agent_start"


class AgentEndEvent(_AgentEvent, tag="agent_end", kw_only=True):
    type: ClassVar[Literal["agent_end"]] = "agent_end"
    messages: list[AgentMessage]


class TurnStartEvent(_AgentEvent, tag="turn_start", kw_only=True):
    type: ClassVar[Literal["turn_start"]] = "turn_start"


class TurnEndEvent(_AgentEvent, tag="turn_end", kw_only=True):
    type: ClassVar[Literal["turn_end"]] = "turn_end"
    message: AgentMessage
    tool_results: list[ToolResultMessage]


class MessageStartEvent(_AgentEvent, tag="message_start", kw_only=True):
    type: ClassVar[Literal["message_start"]] = "message_start"
    message: AgentMessage


class MessageUpdateEvent(_AgentEvent, tag="message_update", kw_only=True):
    type: ClassVar[Literal["message_update"]] = "message_update"
    message: AgentMessage
    assistant_message_event: AssistantMessageEvent


class MessageEndEvent(_AgentEvent, tag="message_end", kw_only=True):
    type: ClassVar[Literal["message_end"]] = "message_end"
    message: AgentMessage


class ToolExecutionStartEvent(_AgentEvent, tag="tool_execution_start", kw_only=True):
    type: ClassVar[Literal["tool_execution_start"]] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: Any


class ToolExecutionUpdateEvent(_AgentEvent, tag="tool_execution_update", kw_only=True):
    type: ClassVar[Literal["tool_execution_update"]] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    args: Any
    partial_result: Any


class ToolExecutionEndEvent(_AgentEvent, tag="tool_execution_end", kw_only=True):
    type: ClassVar[Literal["tool_execution_end"]] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool


AgentEvent: TypeAlias = (
    AgentStartEvent
    | AgentEndEvent
    | TurnStartEvent
    | TurnEndEvent
    | MessageStartEvent
    | MessageUpdateEvent
    | MessageEndEvent
    | ToolExecutionStartEvent
    | ToolExecutionUpdateEvent
    | ToolExecutionEndEvent
)
