"""The event bridge: committed session events -> wire frames -> the hub.

`sessions` publishes each durable `SessionEvent` here (in `seq` order per session, after it is
committed). The bridge renders and serialises each wire shape once (`gateway.protocol.events`:
the native `session.*` frame, OpenClaw's `agent` and `chat` stream frames, `session.message` for
committed messages), and only the shapes some connection takes at that moment (`Hub.takers`),
then hands the frames to the hub. OpenClaw text deltas are paced per run
(`gateway.protocol.delta_pacing`): a held delta goes out with the run's next OpenClaw frame or
when the bridge's timer finds it due (the timer lives from the first held delta until none is
held, or `aclose`). Session list changes become `sessions.changed`, once `list_sessions_with` has
said how to find and show a session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog

from gateway.background import Background
from gateway.hub import Frame, Hub, encode_event, encode_event_json
from gateway.protocol.compat import CompatPayloads
from gateway.protocol.delta_pacing import DeltaPacing
from gateway.protocol.events import EventRenderer, committed_message, native_json
from sessions import EventRecord, SessionEvent, SessionRecord, read_event

log = structlog.get_logger("gateway.bridge")

SessionLookup = Callable[[str], Awaitable[SessionRecord | None]]
"""A session by id, None when it is gone (`Store.tree.get_session`)."""
SessionRowOf = Callable[[SessionRecord], dict[str, Any]]
"""How clients see a session (`gateway.rows.session_row` with the session manager)."""


class Bridge:
    def __init__(
        self, hub: Hub, *, pacing: DeltaPacing | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hub = hub
        self._renderer = EventRenderer(pacing)
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: float | None = None
        self._sessions: tuple[SessionLookup, SessionRowOf] | None = None
        # `sessions.changed` row look-ups in flight, until their frame is sent or `aclose`.
        self._changes = Background("sessions.changed")
        self._listeners: list[tuple[Callable[[SessionEvent], None], bool]] = []
        """Each listener, and whether it hears events committed on other nodes."""
        self._change_listeners: list[Callable[[str, str], None]] = []
        self.published = 0
        """Events committed on this node and published (not those relayed from other nodes)."""

    def list_sessions_with(self, lookup: SessionLookup, row_of: SessionRowOf) -> None:
        """Broadcast `sessions.changed` from now on, finding a changed session with `lookup` and
        showing it with `row_of`. Until this is called, `session_changed` sends nothing (rows name
        the session manager's active runs, so this is called once the manager exists)."""
        self._sessions = (lookup, row_of)

    def add_listener(
        self, listener: Callable[[SessionEvent], None], *, remote: bool = False
    ) -> Callable[[], None]:
        """Call `listener` with every session event published here, in order, after the hub got
        it, until the returned function is called. It runs inside `publish`: it must not block,
        and what it raises is logged and dropped (chat bindings relay replies this way).

        In a cluster, events of the sessions other nodes run are published here too, for this
        node's clients; a listener hears them only with `remote` (one that relays or waits for
        them), not one that acts once per run where the run happens (metrics, traces, hooks)."""
        entry = (listener, remote)
        self._listeners.append(entry)

        def remove() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)

        return remove

    def add_change_listener(self, listener: Callable[[str, str], None]) -> Callable[[], None]:
        """Call `listener(session_id, reason)` for every session list change (`session_changed`),
        until the returned function is called. It must not block; what it raises is logged."""
        self._change_listeners.append(listener)

        def remove() -> None:
            if listener in self._change_listeners:
                self._change_listeners.remove(listener)

        return remove

    # EventPublisher
    def publish(self, event: SessionEvent, *, remote: bool = False) -> None:
        """Fan `event` out and tell the listeners; `remote`: another node committed it (see
        `add_listener`)."""
        if not remote:
            self.published += 1
        try:
            self._publish(event)
        finally:
            for listener, hears_remote in list(self._listeners):
                if remote and not hears_remote:
                    continue
                try:
                    listener(event)
                except Exception:
                    log.exception("session event listener failed", event_name=event.name)

    @property
    def pacing(self) -> DeltaPacing:
        return self._renderer.pacing

    @pacing.setter
    def pacing(self, pacing: DeltaPacing) -> None:
        """Pace OpenClaw deltas by `pacing` from now on (a reloaded configuration)."""
        self._renderer.pacing = pacing

    def _publish(self, event: SessionEvent) -> None:
        session_id = event.session_id
        takers = self.hub.takers(session_id)
        if takers.native:
            frame = encode_event_json("session." + event.name, native_json(event), droppable=event.droppable)
            self.hub.session_native(session_id, event.seq, frame)
        compat = self._renderer.compat(event, now=self._clock(), taken=takers.compat)
        if compat:
            self._send_compat(session_id, compat)
        if takers.messages:
            message = committed_message(event)
            if message is not None:
                self.hub.session_message(session_id, encode_event("session.message", message))
        self._arm()

    def _send_compat(self, session_id: str, payloads: Iterable[CompatPayloads]) -> None:
        for compat in payloads:
            if compat.agent is not None and (not compat.tool or self.hub.takes_tool_stream(session_id)):
                frame = encode_event("agent", compat.agent, droppable=compat.droppable)
                self.hub.openclaw_stream(session_id, frame, tool=compat.tool)
            if compat.chat is not None:
                frame = encode_event("chat", compat.chat, droppable=compat.droppable)
                self.hub.openclaw_stream(session_id, frame)

    def _arm(self) -> None:
        """Run `_flush` when the earliest held delta is due (one timer for all runs)."""
        due = self._renderer.next_deadline()
        if due is None or (self._timer_due is not None and self._timer_due <= due):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test feeding events by hand): the next event releases it
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = loop.call_later(max(0.0, due - self._clock()), self._flush)

    def _flush(self) -> None:
        self._timer = self._timer_due = None
        try:
            for frames in self._renderer.flush_due(self._clock()):
                if self.hub.takers(frames.session_id).compat:
                    self._send_compat(frames.session_id, frames.payloads)
        except Exception:
            log.exception("sending held OpenClaw deltas failed")
        self._arm()

    def native_frame_from_record(self, session: SessionRecord, record: EventRecord) -> Frame:
        """A stored event of `session` as its native frame (replays)."""
        event = read_event(record)
        if event.session_key is None and session.keys:
            event = dataclasses.replace(event, session_key=session.keys[0])
        return encode_event_json("session." + event.name, native_json(event), droppable=event.droppable)

    def session_changed(self, session_id: str, reason: str, *, deleted: SessionRecord | None = None) -> None:
        """Broadcast `sessions.changed` to list subscribers (row fetched in the background)."""
        for listener in list(self._change_listeners):
            try:
                listener(session_id, reason)
            except Exception:
                log.exception("session change listener failed", reason=reason)
        if self._sessions is None or not self.hub.takes_sessions_changed():
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
        """Drop the `sessions.changed` still looking up their session and stop the pacing timer
        (held deltas are not sent: the runs' final frames carry their whole text). Idempotent."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_due = None
        await self._changes.aclose()
