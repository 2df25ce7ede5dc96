"""The payload of each session event: one frozen type per event name.

A `SessionEvent` (`sessions.session_events`) carries exactly one of these as its `data`. Each type
knows its event name (`name`: the wire name without the `session.` prefix), its JSON form
(`dump()`: camelCase fields in a fixed order, exactly as the event log stores them and the native
`session.*` frames send them) and how to read that form back (`load()`; `read_payload` picks the
type by name). Values that are JSON already (a message in pi JSON, tool arguments and results,
usage) are held as they are, so building an event costs one small object and no copying.

`UnknownPayload` is the one exception to "one type per name": it holds a stored event this
version cannot read (a later version wrote it, or its fields do not fit its type), so a replay
still sends it as it was stored instead of losing it. Only `read_payload` makes one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias

import msgspec

from sessions.records import JSONObject
from sessions.schema import SessionStatus
from sessions.termination import TerminationReason

__all__ = [
    "DROPPABLE",
    "EVENT_NAMES",
    "AgentFinished",
    "AgentStarted",
    "DeltaKind",
    "ErrorReported",
    "EventPayload",
    "MessageCompleted",
    "MessageDelta",
    "MessageStarted",
    "StatusChanged",
    "ToolFinished",
    "ToolStarted",
    "ToolUpdated",
    "TurnFinished",
    "TurnStarted",
    "UnknownPayload",
    "read_payload",
]

DeltaKind = Literal["text", "thinking", "toolcall"]


class AgentStarted(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "agent.started"

    def dump(self) -> JSONObject:
        return {}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> AgentStarted:
        return cls()


class TurnStarted(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "turn.started"
    turn_index: int

    def dump(self) -> JSONObject:
        return {"turnIndex": self.turn_index}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> TurnStarted:
        return cls(turn_index=fields["turnIndex"])


class MessageStarted(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "message.started"
    message_id: str
    role: str

    def dump(self) -> JSONObject:
        return {"messageId": self.message_id, "role": self.role}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> MessageStarted:
        return cls(message_id=fields["messageId"], role=fields["role"])


@dataclass(frozen=True, slots=True)
class MessageDelta:
    name: ClassVar[str] = "message.delta"
    message_id: str | None
    """The streaming message (None only for a delta that arrived outside a started message)."""
    content_index: int
    kind: DeltaKind
    delta: str

    def dump(self) -> JSONObject:
        return {
            "messageId": self.message_id,
            "contentIndex": self.content_index,
            "kind": self.kind,
            "delta": self.delta,
        }

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> MessageDelta:
        kind = fields["kind"]
        if kind not in ("text", "thinking", "toolcall"):
            raise ValueError(f"unknown delta kind: {kind!r}")
        return cls(
            message_id=fields["messageId"],
            content_index=fields["contentIndex"],
            kind=kind,
            delta=fields["delta"],
        )


class MessageCompleted(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "message.completed"
    message_id: str
    """Also the id of the message's transcript entry."""
    message: JSONObject
    """The whole message in pi JSON (`role`, `content`, ...); read-only."""

    def dump(self) -> JSONObject:
        return {"messageId": self.message_id, "message": self.message}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> MessageCompleted:
        message = fields["message"]
        if not isinstance(message, dict):
            raise TypeError("a completed message is a JSON object")
        return cls(message_id=fields["messageId"], message=message)


class ToolStarted(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "tool.started"
    tool_call_id: str
    tool_name: str
    args: Any
    """The validated arguments, JSON."""

    def dump(self) -> JSONObject:
        return {"toolCallId": self.tool_call_id, "toolName": self.tool_name, "args": self.args}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> ToolStarted:
        return cls(tool_call_id=fields["toolCallId"], tool_name=fields["toolName"], args=fields["args"])


class ToolUpdated(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "tool.updated"
    tool_call_id: str
    tool_name: str
    partial_result: Any
    """The tool's partial result so far, JSON."""

    def dump(self) -> JSONObject:
        return {
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "partialResult": self.partial_result,
        }

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> ToolUpdated:
        return cls(
            tool_call_id=fields["toolCallId"],
            tool_name=fields["toolName"],
            partial_result=fields["partialResult"],
        )


class ToolFinished(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "tool.finished"
    tool_call_id: str
    tool_name: str
    result: Any
    """The tool's result, JSON."""
    is_error: bool
    duration_ms: int

    def dump(self) -> JSONObject:
        return {
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "result": self.result,
            "isError": self.is_error,
            "durationMs": self.duration_ms,
        }

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> ToolFinished:
        return cls(
            tool_call_id=fields["toolCallId"],
            tool_name=fields["toolName"],
            result=fields["result"],
            is_error=fields["isError"],
            duration_ms=fields["durationMs"],
        )


class TurnFinished(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "turn.finished"
    turn_index: int
    has_tool_calls: bool

    def dump(self) -> JSONObject:
        return {"turnIndex": self.turn_index, "hasToolCalls": self.has_tool_calls}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> TurnFinished:
        return cls(turn_index=fields["turnIndex"], has_tool_calls=fields["hasToolCalls"])


class AgentFinished(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "agent.finished"
    termination_reason: TerminationReason
    total_turns: int
    total_tokens: int
    duration_ms: int
    stop_reason: str | None = None
    """The last assistant message's stop reason; None when the run produced none."""
    usage: JSONObject | None = None
    """The last assistant message's usage (pi JSON)."""
    error_message: str | None = None

    def dump(self) -> JSONObject:
        out: JSONObject = {
            "terminationReason": self.termination_reason.value,
            "totalTurns": self.total_turns,
            "totalTokens": self.total_tokens,
            "durationMs": self.duration_ms,
        }
        # Optional fields are left out rather than sent as null.
        if self.stop_reason is not None:
            out["stopReason"] = self.stop_reason
        if self.usage is not None:
            out["usage"] = self.usage
        if self.error_message is not None:
            out["errorMessage"] = self.error_message
        return out

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> AgentFinished:
        return cls(
            termination_reason=TerminationReason(fields["terminationReason"]),
            total_turns=fields["totalTurns"],
            total_tokens=fields["totalTokens"],
            duration_ms=fields["durationMs"],
            stop_reason=fields.get("stopReason"),
            usage=fields.get("usage"),
            error_message=fields.get("errorMessage"),
        )


class ErrorReported(msgspec.Struct, frozen=True):
    """`session.error`: a failure of the session outside a run's own end."""

    name: ClassVar[str] = "error"
    code: str
    message: str
    recoverable: bool

    def dump(self) -> JSONObject:
        return {"code": self.code, "message": self.message, "recoverable": self.recoverable}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> ErrorReported:
        return cls(code=fields["code"], message=fields["message"], recoverable=fields["recoverable"])


class StatusChanged(msgspec.Struct, frozen=True):
    name: ClassVar[str] = "status.changed"
    status: SessionStatus

    def dump(self) -> JSONObject:
        return {"status": self.status.value}

    @classmethod
    def load(cls, fields: Mapping[str, Any]) -> StatusChanged:
        return cls(status=SessionStatus(fields["status"]))


class UnknownPayload(msgspec.Struct, frozen=True):
    """A stored event this version cannot read as its type; `fields` as stored (read-only)."""

    name: str
    fields: JSONObject

    def dump(self) -> JSONObject:
        return dict(self.fields)


EventPayload: TypeAlias = (
    AgentStarted
    | TurnStarted
    | MessageStarted
    | MessageDelta
    | MessageCompleted
    | ToolStarted
    | ToolUpdated
    | ToolFinished
    | TurnFinished
    | AgentFinished
    | ErrorReported
    | StatusChanged
    | UnknownPayload
)

_LOADERS: Mapping[str, Callable[[Mapping[str, Any]], EventPayload]] = {
    kind.name: kind.load
    for kind in (
        AgentStarted,
        TurnStarted,
        MessageStarted,
        MessageDelta,
        ToolStarted,
        ToolUpdated,
        ToolFinished,
        MessageCompleted,
        TurnFinished,
        AgentFinished,
        ErrorReported,
        StatusChanged,
    )
}

#: Names of the session events, without the `session.` prefix used on the wire.
EVENT_NAMES: tuple[str, ...] = tuple(_LOADERS)

#: Events a slow consumer may lose (coalesced or dropped with a visible gap) and that the event
#: log may prune once their message is complete: the completed message carries their content.
DROPPABLE = frozenset({MessageDelta.name, ToolUpdated.name})


def read_payload(name: str, fields: Mapping[str, Any]) -> EventPayload:
    """The payload of a stored event named `name` from its JSON `fields` (keys that are not the
    type's are ignored). Never raises: what does not fit its type becomes an `UnknownPayload`."""
    load = _LOADERS.get(name)
    if load is not None:
        try:
            return load(fields)
        except (KeyError, TypeError, ValueError):
            pass
    return UnknownPayload(name, dict(fields))
