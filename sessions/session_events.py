"""Session events: what a session does, as durable numbered records.

Every `AgentEvent` of a run is translated into zero or more `SessionEvent`s (the gateway's session
lifecycle), each stamped with the session's next `seq`. They are written to the event log and then
published; the gateway renders them as native `session.*` frames and as OpenClaw `agent`/`chat`
frames. The translation is stateful per run (`RunTranslator`): it assigns message ids, counts
turns and times tools.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_core import (
    AgentEndEvent,
    AgentEvent,
    AgentStartEvent,
    AssistantMessage,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallDeltaEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from sessions.ids import new_id

__all__ = [
    "open_reply",
    "DROPPABLE",
    "EVENT_NAMES",
    "Draft",
    "EventPublisher",
    "NullPublisher",
    "RunTranslator",
    "SessionEvent",
]

#: Events a slow consumer may lose (coalesced or dropped with a visible gap) and that the event
#: log may prune once their message is complete: the completed message carries their content.
DROPPABLE = frozenset({"message.delta", "tool.updated"})

#: Names of the session lifecycle events, without the `session.` prefix used on the wire.
EVENT_NAMES = (
    "agent.started",
    "turn.started",
    "message.started",
    "message.delta",
    "tool.started",
    "tool.updated",
    "tool.finished",
    "message.completed",
    "turn.finished",
    "agent.finished",
    "error",
    "status.changed",
)


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """One durable event of a session. `data` holds the camelCase payload fields."""

    session_id: str
    seq: int
    name: str
    data: dict[str, Any]
    run_id: str | None = None
    session_key: str | None = None
    ts: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def droppable(self) -> bool:
        return self.name in DROPPABLE

    def payload(self) -> dict[str, Any]:
        """The native wire payload (`session.<name>` frames)."""
        out: dict[str, Any] = {
            "sessionId": self.session_id,
            "sessionKey": self.session_key,
            "sessionSeq": self.seq,
        }
        if self.run_id is not None:
            out["runId"] = self.run_id
        out["ts"] = self.ts
        out.update(self.data)
        return out


class EventPublisher(Protocol):
    """Where committed session events go (the gateway's hub implements it).

    `publish` is called in `seq` order per session, after the event is durable; it must not block.
    """

    def publish(self, event: SessionEvent) -> None: ...


class NullPublisher:
    def publish(self, event: SessionEvent) -> None:
        return None


@dataclass(slots=True)
class Draft:
    """A session event before it has a `seq`."""

    name: str
    data: dict[str, Any]


class RunTranslator:
    """Turns one run's `AgentEvent`s into session event drafts.

    Lives for one run. Message ids are assigned at `message_start` and reused as the transcript
    entry id at `message_end`, so `message.delta` and `message.completed` name the same message.
    """

    def __init__(self) -> None:
        self.turn_index = -1
        self.total_turns = 0
        self.message_id: str | None = None
        self.tool_started_at: dict[str, float] = {}
        self.started_at = time.monotonic()
        self.total_tokens = 0
        self.last_assistant: AssistantMessage | None = None

    def translate(self, event: AgentEvent) -> list[Draft]:
        if isinstance(event, MessageUpdateEvent):
            return self._update(event)
        if isinstance(event, MessageStartEvent):
            self.message_id = new_id()
            return [Draft("message.started", {"messageId": self.message_id, "role": event.message.role})]
        if isinstance(event, MessageEndEvent):
            message_id = self.message_id or new_id()
            self.message_id = None
            if isinstance(event.message, AssistantMessage):
                self.last_assistant = event.message
                self.total_tokens += event.message.usage.total_tokens
            return [Draft("message.completed", {"messageId": message_id, "message": event.message.dump()})]
        if isinstance(event, ToolExecutionStartEvent):
            self.tool_started_at[event.tool_call_id] = time.monotonic()
            return [
                Draft(
                    "tool.started",
                    {"toolCallId": event.tool_call_id, "toolName": event.tool_name, "args": event.args},
                )
            ]
        if isinstance(event, ToolExecutionUpdateEvent):
            return [
                Draft(
                    "tool.updated",
                    {
                        "toolCallId": event.tool_call_id,
                        "toolName": event.tool_name,
                        "partialResult": _jsonable(event.partial_result),
                    },
                )
            ]
        if isinstance(event, ToolExecutionEndEvent):
            began = self.tool_started_at.pop(event.tool_call_id, None)
            duration = int((time.monotonic() - began) * 1000) if began is not None else 0
            return [
                Draft(
                    "tool.finished",
                    {
                        "toolCallId": event.tool_call_id,
                        "toolName": event.tool_name,
                        "result": _jsonable(event.result),
                        "isError": event.is_error,
                        "durationMs": duration,
                    },
                )
            ]
        if isinstance(event, TurnStartEvent):
            self.turn_index += 1
            self.total_turns += 1
            return [Draft("turn.started", {"turnIndex": self.turn_index})]
        if isinstance(event, TurnEndEvent):
            has_calls = bool(event.tool_results)
            return [Draft("turn.finished", {"turnIndex": self.turn_index, "hasToolCalls": has_calls})]
        if isinstance(event, AgentStartEvent):
            return [Draft("agent.started", {})]
        if isinstance(event, AgentEndEvent):
            # agent.finished is produced by the live session, which knows the termination reason.
            return []
        return []

    def _update(self, event: MessageUpdateEvent) -> list[Draft]:
        inner = event.assistant_message_event
        if isinstance(inner, TextDeltaEvent):
            kind = "text"
        elif isinstance(inner, ThinkingDeltaEvent):
            kind = "thinking"
        elif isinstance(inner, ToolCallDeltaEvent):
            kind = "toolcall"
        else:
            return []
        return [
            Draft(
                "message.delta",
                {
                    "messageId": self.message_id,
                    "contentIndex": inner.content_index,
                    "kind": kind,
                    "delta": inner.delta,
                },
            )
        ]

    def finished(self, termination_reason: str, *, error_message: str | None = None) -> Draft:
        last = self.last_assistant
        data: dict[str, Any] = {
            "terminationReason": termination_reason,
            "totalTurns": self.total_turns,
            "totalTokens": self.total_tokens,
            "durationMs": int((time.monotonic() - self.started_at) * 1000),
        }
        if last is not None:
            data["stopReason"] = last.stop_reason
            data["usage"] = last.usage.dump()
            if last.error_message:
                data["errorMessage"] = last.error_message
        if error_message is not None:
            data["errorMessage"] = error_message
        return Draft("agent.finished", data)


def open_reply(events: Iterable[Any]) -> tuple[str, str | None]:
    """From logged events (records with `type` and a dict `payload`, in seq order): the text
    streamed so far for the assistant message still open at the end, and its message id
    (`("", None)` when every started message was completed)."""
    open_id: str | None = None
    text: list[str] = []
    for event in events:
        payload = event.payload
        if event.type == "message.started" and payload.get("role") == "assistant":
            open_id, text = payload.get("messageId"), []
        elif event.type == "message.delta" and payload.get("messageId") == open_id:
            if payload.get("kind") == "text":
                text.append(str(payload.get("delta", "")))
        elif event.type == "message.completed" and payload.get("messageId") == open_id:
            open_id, text = None, []
    return ("".join(text), open_id) if open_id is not None else ("", None)


def _jsonable(value: Any) -> Any:
    """Tool results are dataclasses or models; events carry their JSON form."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    dump = getattr(value, "dump", None)
    if callable(dump):
        return dump()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        out = {}
        for name in fields:
            item = getattr(value, name)
            if item is not None:
                out[name] = _jsonable(item)
        return out
    return str(value)
