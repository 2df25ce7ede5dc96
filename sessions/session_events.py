"""Session events: what a session does, as durable numbered records.

Every `AgentEvent` of a run is translated into zero or more event payloads (the gateway's session
lifecycle; one typed payload per event name, see `sessions.event_payloads`), each wrapped in a
`SessionEvent` stamped with the session's next `seq`. They are written to the event log and then
published; the gateway renders them as native `session.*` frames and as OpenClaw `agent`/`chat`
frames. The translation is stateful per run (`RunTranslator`): it assigns message ids, counts
turns and times tools. `read_event` turns a stored event back into a `SessionEvent`.
"""

from __future__ import annotations

import functools
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
from sessions._json import dumps, dumps_event
from sessions.event_payloads import (
    DROPPABLE,
    AgentFinished,
    AgentStarted,
    DeltaKind,
    EventPayload,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFinished,
    TurnStarted,
    read_payload,
)
from sessions.ids import new_id
from sessions.records import EventRecord, JSONObject
from sessions.termination import TerminationReason

__all__ = [
    "EventPublisher",
    "NullPublisher",
    "RunTranslator",
    "SessionEvent",
    "open_reply",
    "read_event",
]


def _now_ms() -> int:
    return int(time.time() * 1000)


# A session's key is the same in every event it streams: encode it once (a few thousand live
# sessions fit; one that falls out is encoded again).
_key_json = functools.lru_cache(maxsize=4096)(dumps)


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """One durable event of a session: the envelope and its typed payload (`data`)."""

    session_id: str
    seq: int
    data: EventPayload
    run_id: str | None = None
    session_key: str | None = None
    ts: int = field(default_factory=_now_ms)
    """Wall-clock time of the event, epoch milliseconds."""
    _data_json: str | None = field(default=None, init=False, repr=False, compare=False)
    """`data_json()` once it has been asked for (the payload is immutable, so is its text)."""

    @property
    def name(self) -> str:
        """The event name without the wire's `session.` prefix, e.g. `message.delta`."""
        return self.data.name

    @property
    def droppable(self) -> bool:
        return self.data.name in DROPPABLE

    def log_payload(self) -> JSONObject:
        """The JSON the event log stores for this event: the payload's fields, then `ts` and
        `sessionKey` (when known). `read_event` reverses it."""
        out = self.data.dump()
        out["ts"] = self.ts
        if self.session_key is not None:
            out["sessionKey"] = self.session_key
        return out

    def data_json(self) -> str:
        """`data.dump()` as compact JSON text (non-ASCII kept), encoded on first use and kept with
        the event: the journal stores it inside `log_json()`, and the gateway may splice it into
        its frames instead of encoding the payload again. Raise InvalidRequest for a payload JSON
        cannot hold."""
        text = self._data_json
        if text is None:
            text = dumps_event(self.data.dump())
            object.__setattr__(self, "_data_json", text)
        return text

    def log_json(self) -> str:
        """`log_payload()` as JSON text, built around `data_json()` (the payload is not encoded
        again). Raise InvalidRequest for a payload JSON cannot hold."""
        data = self.data_json()
        head = "{" if data == "{}" else data[:-1] + ","
        if self.session_key is None:
            return f'{head}"ts":{self.ts}}}'
        return f'{head}"ts":{self.ts},"sessionKey":{_key_json(self.session_key)}}}'


def read_event(record: EventRecord) -> SessionEvent:
    """A stored event (`SessionEvent.log_payload` in the log) as the event it was. Never raises: a
    record this version cannot read keeps its stored fields (`UnknownPayload`)."""
    fields = dict(record.payload)
    ts = fields.pop("ts", None)
    key = fields.pop("sessionKey", None)
    return SessionEvent(
        session_id=record.session_id,
        seq=record.seq,
        data=read_payload(record.type, fields),
        run_id=record.run_id,
        session_key=key if isinstance(key, str) else None,
        ts=ts if isinstance(ts, int) else record.created_at,
    )


class EventPublisher(Protocol):
    """Where committed session events go (the gateway's hub implements it).

    `publish` is called in `seq` order per session, after the event is durable; it must not block.
    """

    def publish(self, event: SessionEvent) -> None: ...


class NullPublisher:
    def publish(self, event: SessionEvent) -> None:
        return None


class RunTranslator:
    """Turns one run's `AgentEvent`s into session event payloads.

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

    def translate(self, event: AgentEvent) -> list[EventPayload]:
        if isinstance(event, MessageUpdateEvent):
            return self._update(event)
        if isinstance(event, MessageStartEvent):
            self.message_id = new_id()
            return [MessageStarted(message_id=self.message_id, role=event.message.role)]
        if isinstance(event, MessageEndEvent):
            message_id = self.message_id or new_id()
            self.message_id = None
            if isinstance(event.message, AssistantMessage):
                self.last_assistant = event.message
                self.total_tokens += event.message.usage.total_tokens
            return [MessageCompleted(message_id=message_id, message=event.message.dump())]
        if isinstance(event, ToolExecutionStartEvent):
            self.tool_started_at[event.tool_call_id] = time.monotonic()
            return [ToolStarted(tool_call_id=event.tool_call_id, tool_name=event.tool_name, args=event.args)]
        if isinstance(event, ToolExecutionUpdateEvent):
            return [
                ToolUpdated(
                    tool_call_id=event.tool_call_id,
                    tool_name=event.tool_name,
                    partial_result=_jsonable(event.partial_result),
                )
            ]
        if isinstance(event, ToolExecutionEndEvent):
            began = self.tool_started_at.pop(event.tool_call_id, None)
            duration = int((time.monotonic() - began) * 1000) if began is not None else 0
            return [
                ToolFinished(
                    tool_call_id=event.tool_call_id,
                    tool_name=event.tool_name,
                    result=_jsonable(event.result),
                    is_error=event.is_error,
                    duration_ms=duration,
                )
            ]
        if isinstance(event, TurnStartEvent):
            self.turn_index += 1
            self.total_turns += 1
            return [TurnStarted(turn_index=self.turn_index)]
        if isinstance(event, TurnEndEvent):
            return [TurnFinished(turn_index=self.turn_index, has_tool_calls=bool(event.tool_results))]
        if isinstance(event, AgentStartEvent):
            return [AgentStarted()]
        if isinstance(event, AgentEndEvent):
            # agent.finished is produced by the live session, which knows the termination reason.
            return []
        return []

    def _update(self, event: MessageUpdateEvent) -> list[EventPayload]:
        inner = event.assistant_message_event
        kind: DeltaKind
        if isinstance(inner, TextDeltaEvent):
            kind = "text"
        elif isinstance(inner, ThinkingDeltaEvent):
            kind = "thinking"
        elif isinstance(inner, ToolCallDeltaEvent):
            kind = "toolcall"
        else:
            return []
        return [
            MessageDelta(
                message_id=self.message_id, content_index=inner.content_index, kind=kind, delta=inner.delta
            )
        ]

    def finished(self, termination_reason: str, *, error_message: str | None = None) -> AgentFinished:
        """The run's `agent.finished`; `error_message` overrides the last reply's own. Raises
        ValueError when `termination_reason` is not a `TerminationReason` value."""
        last = self.last_assistant
        if error_message is None and last is not None and last.error_message:
            error_message = last.error_message
        return AgentFinished(
            termination_reason=TerminationReason(termination_reason),
            total_turns=self.total_turns,
            total_tokens=self.total_tokens,
            duration_ms=int((time.monotonic() - self.started_at) * 1000),
            stop_reason=last.stop_reason if last is not None else None,
            usage=last.usage.dump() if last is not None else None,
            error_message=error_message,
        )


def open_reply(events: Iterable[EventRecord]) -> tuple[str, str | None]:
    """From stored events (in seq order): the text streamed so far for the assistant message still
    open at the end, and its message id (`("", None)` when every started message was completed)."""
    open_id: str | None = None
    text: list[str] = []
    for record in events:
        payload = read_payload(record.type, record.payload)
        if isinstance(payload, MessageStarted):
            if payload.role == "assistant":
                open_id, text = payload.message_id, []
        elif isinstance(payload, MessageDelta):
            if payload.message_id == open_id and payload.kind == "text":
                text.append(payload.delta)
        elif isinstance(payload, MessageCompleted) and payload.message_id == open_id:
            open_id, text = None, []
    return ("".join(text), open_id) if open_id is not None else ("", None)


def _jsonable(value: Any) -> Any:
    """Tool results are structs, dataclasses or models; events carry their JSON form."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    dump = getattr(value, "dump", None)
    if callable(dump):
        return dump()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    fields = getattr(value, "__struct_fields__", None) or getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        out = {}
        for name in fields:
            item = getattr(value, name)
            if item is not None:
                out[name] = _jsonable(item)
        return out
    return str(value)
