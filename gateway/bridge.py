"""The event bridge: committed session events -> wire frames -> the hub.

`sessions` publishes each durable `SessionEvent` here (in `seq` order per session, after it is
committed). The bridge renders it once per wire shape — the native `session.*` frame, OpenClaw's
`agent` and `chat` stream frames, `session.message` for committed messages — and hands the
serialised frames to the hub. Session list changes become `sessions.changed`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from gateway.hub import Frame, Hub, encode_event
from gateway.protocol import compat
from gateway.protocol import events as wire
from gateway.rows import session_row
from sessions.manager import agent_from_key
from sessions.session_events import SessionEvent

if TYPE_CHECKING:
    from sessions.manager import SessionManager
    from sessions.store import EventRecord, SessionRecord

log = structlog.get_logger("gateway.bridge")

#: Session events OpenClaw clients see something of.
_COMPAT_EVENTS = frozenset(
    {
        "agent.started",
        "message.started",
        "message.delta",
        "message.completed",
        "tool.started",
        "tool.updated",
        "tool.finished",
        "agent.finished",
    }
)
#: Our native field names -> the wire event classes' names.
_FIELD_NAMES = {"toolName": "name", "partialResult": "partial"}


class Bridge:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.manager: SessionManager | None = None
        self._runs: dict[str, compat.RunStream] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self.published = 0

    def add_listener(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call `listener` with every published session event, in order, after the hub got it,
        until the returned function is called. It runs inside `publish`: it must not block, and
        what it raises is logged and dropped (chat bindings relay replies this way)."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    # EventPublisher
    def publish(self, event: SessionEvent) -> None:
        self.published += 1
        try:
            self._publish(event)
        finally:
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:
                    log.exception("session event listener failed", event_name=event.name)

    def _publish(self, event: SessionEvent) -> None:
        frame = encode_event("session." + event.name, event.payload(), droppable=event.droppable)
        self.hub.session_native(event.session_id, event.seq, frame)
        self._render_compat(event)
        if event.name == "message.completed":
            message = event.data.get("message")
            payload = {
                "sessionKey": event.session_key,
                "sessionId": event.session_id,
                "messageId": event.data.get("messageId"),
                "messageSeq": event.seq,
                "message": message,
            }
            self.hub.session_message(event.session_id, encode_event("session.message", payload))

    def _render_compat(self, event: SessionEvent) -> None:
        """OpenClaw's `agent`/`chat` frames for events of a run (per-run state lives until the
        run's `agent.finished`)."""
        run_id = event.run_id
        if run_id is None or event.name not in _COMPAT_EVENTS:
            return
        run = self._runs.get(run_id)
        if run is None:
            key = event.session_key or ""
            run = self._runs[run_id] = compat.RunStream(
                run_id=run_id, session_key=key, session_id=event.session_id, agent_id=agent_from_key(key)
            )
        if event.name == "agent.finished":
            self._runs.pop(run_id, None)
        fields = {_FIELD_NAMES.get(k, k): v for k, v in event.data.items()}
        try:
            wire_event = wire.SessionEvent.from_record(
                {
                    "sessionId": event.session_id,
                    "sessionKey": event.session_key or "",
                    "sessionSeq": event.seq,
                    "name": event.name,
                    "ts": event.ts,
                    "fields": fields,
                    "runId": run_id,
                }
            )
        except (KeyError, ValueError, TypeError):
            log.exception("could not render an event for OpenClaw clients", event_name=event.name)
            return
        out = compat.render_compat(wire_event, run)
        if out is None:
            return
        if out.agent is not None:
            frame = encode_event("agent", out.agent, droppable=out.droppable)
            self.hub.openclaw_stream(event.session_id, frame, tool=out.tool)
        if out.chat is not None:
            frame = encode_event("chat", out.chat, droppable=out.droppable)
            self.hub.openclaw_stream(event.session_id, frame)

    def native_frame_from_record(self, session: SessionRecord, record: EventRecord) -> Frame:
        """A stored event as its native frame (replays)."""
        payload = record.payload if isinstance(record.payload, dict) else json.loads(record.payload)
        data = dict(payload)
        ts = data.pop("ts", None)
        key = data.pop("sessionKey", None) or (session.keys[0] if session.keys else None)
        event = SessionEvent(
            session_id=session.id,
            seq=record.seq,
            name=record.type,
            data=data,
            run_id=record.run_id,
            session_key=key,
            ts=ts if isinstance(ts, int) else int(time.time() * 1000),
        )
        return encode_event("session." + event.name, event.payload(), droppable=event.droppable)

    def session_changed(self, session_id: str, reason: str, *, deleted: SessionRecord | None = None) -> None:
        """Broadcast `sessions.changed` to list subscribers (row fetched in the background)."""
        if not any(o.sessions_list for o in self.hub.outlets.values()):
            return
        task = asyncio.ensure_future(self._changed(session_id, reason, deleted))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _changed(self, session_id: str, reason: str, deleted: SessionRecord | None) -> None:
        manager = self.manager
        if manager is None:
            return
        try:
            record = deleted or await manager.store.get_session(session_id)
        except Exception:
            log.exception("could not load a changed session", session_id=session_id)
            return
        if record is None:
            return
        row = session_row(record, manager)
        payload = {
            "sessionKey": row["key"],
            "sessionId": record.id,
            "agentId": record.agent_id,
            "reason": reason,
            "ts": int(time.time() * 1000),
            "session": row,
            **row,
        }
        if deleted is not None:
            payload["deleted"] = True
        self.hub.sessions_changed(encode_event("sessions.changed", payload, droppable=True))

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
