"""The event bridge: committed session events -> wire frames -> the hub.

`sessions` publishes each durable `SessionEvent` here (in `seq` order per session, after it is
committed). The bridge has it rendered once per wire shape (`gateway.protocol.events`: the native
`session.*` frame, OpenClaw's `agent` and `chat` stream frames, `session.message` for committed
messages), serialises each shape once and hands the frames to the hub. Session list changes
become `sessions.changed`, once `list_sessions_with` has said how to find and show a session.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gateway.background import Background
from gateway.hub import Frame, Hub, encode_event
from gateway.protocol.events import EventRenderer, native
from sessions import EventRecord, SessionEvent, SessionRecord, read_event

log = structlog.get_logger("gateway.bridge")

SessionLookup = Callable[[str], Awaitable[SessionRecord | None]]
"""A session by id, None when it is gone (`Store.tree.get_session`)."""
SessionRowOf = Callable[[SessionRecord], dict[str, Any]]
"""How clients see a session (`gateway.rows.session_row` with the session manager)."""


class Bridge:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._renderer = EventRenderer()
        self._sessions: tuple[SessionLookup, SessionRowOf] | None = None
        # `sessions.changed` row look-ups in flight, until their frame is sent or `aclose`.
        self._changes = Background("sessions.changed")
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self.published = 0

    def list_sessions_with(self, lookup: SessionLookup, row_of: SessionRowOf) -> None:
        """Broadcast `sessions.changed` from now on, finding a changed session with `lookup` and
        showing it with `row_of`. Until this is called, `session_changed` sends nothing (rows name
        the session manager's active runs, so this is called once the manager exists)."""
        self._sessions = (lookup, row_of)

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
        rendered = self._renderer.render(event)
        frame = encode_event(rendered.name, rendered.payload, droppable=rendered.droppable)
        self.hub.session_native(event.session_id, event.seq, frame)
        openclaw = rendered.openclaw
        if openclaw is not None:
            if openclaw.agent is not None:
                frame = encode_event("agent", openclaw.agent, droppable=openclaw.droppable)
                self.hub.openclaw_stream(event.session_id, frame, tool=openclaw.tool)
            if openclaw.chat is not None:
                frame = encode_event("chat", openclaw.chat, droppable=openclaw.droppable)
                self.hub.openclaw_stream(event.session_id, frame)
        if rendered.message is not None:
            self.hub.session_message(event.session_id, encode_event("session.message", rendered.message))

    def native_frame_from_record(self, session: SessionRecord, record: EventRecord) -> Frame:
        """A stored event of `session` as its native frame (replays)."""
        event = read_event(record)
        if event.session_key is None and session.keys:
            event = dataclasses.replace(event, session_key=session.keys[0])
        name, payload = native(event)
        return encode_event(name, payload, droppable=event.droppable)

    def session_changed(self, session_id: str, reason: str, *, deleted: SessionRecord | None = None) -> None:
        """Broadcast `sessions.changed` to list subscribers (row fetched in the background)."""
        if self._sessions is None or not any(o.sessions_list for o in self.hub.outlets.values()):
            return
        self._changes.spawn(
            self._changed(self._sessions, session_id, reason, deleted), name="sessions-changed"
        )

    async def _changed(
        self,
        sessions: tuple[SessionLookup, SessionRowOf],
        session_id: str,
        reason: str,
        deleted: SessionRecord | None,
    ) -> None:
        lookup, row_of = sessions
        try:
            record = deleted or await lookup(session_id)
            if record is None:
                return
            row = row_of(record)
        except Exception:
            log.exception("could not load a changed session", session_id=session_id)
            return
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

    async def join(self) -> None:
        """Wait until every `sessions.changed` announced so far has been sent (or failed)."""
        await self._changes.join()

    async def aclose(self) -> None:
        """Drop the `sessions.changed` still looking up their session. Idempotent."""
        await self._changes.aclose()
