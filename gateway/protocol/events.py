"""Session events and their native wire form.

The event bridge fills a `SessionEvent` (an envelope plus one of the small data classes below)
for everything a session does. This module renders the native `session.<name>` payload,
`{sessionId, sessionKey, sessionSeq, runId?, ts, ...}`, also from the stored record form
(`SessionEvent.to_record()`), so a replay after a reconnect renders identical payloads.
`gateway.protocol.compat` renders the same events in OpenClaw's `agent` / `chat` shapes.

Nothing here does I/O or touches the clock: timestamps come from the event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, TypeAlias

DeltaKind = Literal["text", "thinking", "toolcall"]
SessionStatus = Literal["idle", "running", "interrupted", "archived"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class _Data:
    """Shared behaviour of the event data classes: camelCase fields in, camelCase fields out."""

    kind: ClassVar[str]
    name: ClassVar[str]

    def to_fields(self) -> dict[str, Any]:
        """The kind-specific fields, camelCase; None-valued optional fields are left out."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            out[_camel(f.name)] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> Any:
        kwargs = {f.name: data[_camel(f.name)] for f in fields(cls) if _camel(f.name) in data}  # type: ignore[arg-type]
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class AgentStarted(_Data):
    kind: ClassVar[str] = "agent_started"
    name: ClassVar[str] = "agent.started"
    model: str | None = None


@dataclass(frozen=True, slots=True)
class TurnStarted(_Data):
    kind: ClassVar[str] = "turn_started"
    name: ClassVar[str] = "turn.started"
    turn_index: int = 0


@dataclass(frozen=True, slots=True)
class MessageStarted(_Data):
    kind: ClassVar[str] = "message_started"
    name: ClassVar[str] = "message.started"
    message_id: str
    role: str = "assistant"


@dataclass(frozen=True, slots=True)
class MessageDelta(_Data):
    kind: ClassVar[str] = "message_delta"
    name: ClassVar[str] = "message.delta"
    message_id: str
    content_index: int
    delta_kind: DeltaKind
    delta: str
    text: str | None = None
    """Cumulative text of the message's text content so far (text deltas); not sent natively."""

    def to_fields(self) -> dict[str, Any]:
        return {
            "messageId": self.message_id,
            "contentIndex": self.content_index,
            "kind": self.delta_kind,
            "delta": self.delta,
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> MessageDelta:
        return cls(
            message_id=data["messageId"],
            content_index=data["contentIndex"],
            delta_kind=data["kind"],
            delta=data["delta"],
        )


@dataclass(frozen=True, slots=True)
class ToolStarted(_Data):
    kind: ClassVar[str] = "tool_started"
    name: ClassVar[str] = "tool.started"
    tool_call_id: str
    tool_name: str
    args: Any = None

    def to_fields(self) -> dict[str, Any]:
        return {"toolCallId": self.tool_call_id, "name": self.tool_name, "args": self.args}

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> ToolStarted:
        return cls(tool_call_id=data["toolCallId"], tool_name=data["name"], args=data.get("args"))


@dataclass(frozen=True, slots=True)
class ToolUpdated(_Data):
    kind: ClassVar[str] = "tool_updated"
    name: ClassVar[str] = "tool.updated"
    tool_call_id: str
    tool_name: str
    partial: Any = None

    def to_fields(self) -> dict[str, Any]:
        return {"toolCallId": self.tool_call_id, "name": self.tool_name, "partial": self.partial}

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> ToolUpdated:
        return cls(tool_call_id=data["toolCallId"], tool_name=data["name"], partial=data.get("partial"))


@dataclass(frozen=True, slots=True)
class ToolFinished(_Data):
    kind: ClassVar[str] = "tool_finished"
    name: ClassVar[str] = "tool.finished"
    tool_call_id: str
    tool_name: str
    result: Any
    is_error: bool
    duration_ms: int

    def to_fields(self) -> dict[str, Any]:
        return {
            "toolCallId": self.tool_call_id,
            "name": self.tool_name,
            "result": self.result,
            "isError": self.is_error,
            "durationMs": self.duration_ms,
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> ToolFinished:
        return cls(
            tool_call_id=data["toolCallId"],
            tool_name=data["name"],
            result=data.get("result"),
            is_error=data["isError"],
            duration_ms=data["durationMs"],
        )


@dataclass(frozen=True, slots=True)
class MessageCompleted(_Data):
    kind: ClassVar[str] = "message_completed"
    name: ClassVar[str] = "message.completed"
    message_id: str
    message: Mapping[str, Any]
    """The full message in its wire form (camelCase keys, `role`, `content`, ...)."""


@dataclass(frozen=True, slots=True)
class TurnFinished(_Data):
    kind: ClassVar[str] = "turn_finished"
    name: ClassVar[str] = "turn.finished"
    has_tool_calls: bool
    turn_index: int = 0


@dataclass(frozen=True, slots=True)
class AgentFinished(_Data):
    kind: ClassVar[str] = "agent_finished"
    name: ClassVar[str] = "agent.finished"
    termination_reason: str
    """Why the run ended: `completed`, `aborted`, `error`, `timeout`, `gateway_shutdown`, ..."""
    total_turns: int
    total_tokens: int
    duration_ms: int
    stop_reason: str | None = None
    """The last assistant message's stop reason (`stop`, `length`, `toolUse`, `error`, `aborted`)."""
    usage: Mapping[str, Any] | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class SessionError(_Data):
    kind: ClassVar[str] = "error"
    name: ClassVar[str] = "error"
    code: str
    message: str
    recoverable: bool


@dataclass(frozen=True, slots=True)
class StatusChanged(_Data):
    kind: ClassVar[str] = "status_changed"
    name: ClassVar[str] = "status.changed"
    status: SessionStatus


EventData: TypeAlias = (
    AgentStarted
    | TurnStarted
    | MessageStarted
    | MessageDelta
    | ToolStarted
    | ToolUpdated
    | ToolFinished
    | MessageCompleted
    | TurnFinished
    | AgentFinished
    | SessionError
    | StatusChanged
)

_BY_NAME: Mapping[str, type[_Data]] = {
    cls.name: cls
    for cls in (
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
        SessionError,
        StatusChanged,
    )
}


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """One numbered thing a session did: the envelope every wire shape needs plus its data."""

    session_id: str
    session_key: str
    session_seq: int
    """The session's durable sequence number of this event (1, 2, ...)."""
    ts: int
    """Wall-clock time of the event, epoch milliseconds."""
    data: EventData
    run_id: str | None = None
    agent_id: str | None = None

    @property
    def kind(self) -> str:
        return self.data.kind

    @property
    def event_name(self) -> str:
        """The native wire event name, e.g. `session.message.delta`."""
        return "session." + self.data.name

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready form to store in the event log; `from_record` reverses it."""
        record: dict[str, Any] = {
            "sessionId": self.session_id,
            "sessionKey": self.session_key,
            "sessionSeq": self.session_seq,
            "name": self.data.name,
            "ts": self.ts,
            "fields": self.data.to_fields(),
        }
        if self.run_id is not None:
            record["runId"] = self.run_id
        if self.agent_id is not None:
            record["agentId"] = self.agent_id
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SessionEvent:
        """Rebuild an event from `to_record()` output. Raises KeyError/ValueError for records
        that are not one."""
        data_cls = _BY_NAME.get(record["name"])
        if data_cls is None:
            raise ValueError(f"unknown session event name: {record['name']!r}")
        return cls(
            session_id=record["sessionId"],
            session_key=record["sessionKey"],
            session_seq=record["sessionSeq"],
            ts=record["ts"],
            data=data_cls.from_fields(record.get("fields") or {}),
            run_id=record.get("runId"),
            agent_id=record.get("agentId"),
        )


# --- native ---------------------------------------------------------------------------------


def render_native_record(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """`(event name, payload)` of a stored event record (see `SessionEvent.to_record`)."""
    payload: dict[str, Any] = {
        "sessionId": record["sessionId"],
        "sessionKey": record["sessionKey"],
        "sessionSeq": record["sessionSeq"],
    }
    if record.get("runId") is not None:
        payload["runId"] = record["runId"]
    payload["ts"] = record["ts"]
    for key, value in (record.get("fields") or {}).items():
        payload.setdefault(key, value)
    return "session." + record["name"], payload


def render_native(event: SessionEvent) -> tuple[str, dict[str, Any]]:
    """`(event name, payload)` of the native `session.*` frame for `event`."""
    return render_native_record(event.to_record())


def render_snapshot(
    *,
    session_id: str,
    session_key: str,
    session_seq: int,
    messages: Sequence[Mapping[str, Any]],
    partial: Mapping[str, Any] | None,
) -> tuple[str, dict[str, Any]]:
    """The `session.snapshot` a compacted resume starts with: the messages committed after the
    client's `afterSeq`, the in-flight partial message (or None), current as of `session_seq`."""
    return "session.snapshot", {
        "sessionId": session_id,
        "sessionKey": session_key,
        "sessionSeq": session_seq,
        "messages": [dict(m) for m in messages],
        "partial": dict(partial) if partial is not None else None,
    }
