"""The hub: the registry of connections and the fan-out of every kind of event to them.

Each event is serialised once (`encode_event`); every recipient gets the same text with only its
per-connection `seq` spliced in. Each connection has a bounded send buffer drained by one writer
(`gateway.send_buffer`, which also states the overflow policy): a consumer that falls behind never
stalls a session or the other clients. Durable session events can always be recovered with
`sessions.events.subscribe {afterSeq}`, whose replay the hub paces (`gateway.replay`).

Routing an event costs O(its recipients), not O(all connections): the hub indexes, per session and
per wire shape, the connections that take it (native `session.*` followers, `session.message`
followers, OpenClaw `agent`/`chat` takers that scoped their streams to the sessions they follow),
and keeps apart the readers that get every session's `agent`/`chat` frames (read scope, no
`session-scoped-events` cap, no `native-events-only` cap). The indexes change on subscribe,
unsubscribe and close; `takers` reads them, so that the bridge renders and serialises a shape
only when some connection takes it. The hub also indexes subscriptions made by key before any
session used the key, and subscribe calls still looking a key up; `session_named` turns them into
session subscriptions when the key's session publishes its first event.

Back-pressure below the hub: uvicorn's WebSocket `send` waits while the socket's transport is
paused (its write buffer is over the high-water mark), so a client that stops reading blocks only
its own writer task. A `websocket.close` waits behind that same pause, so closing a stuck
connection politely can block for as long as the client does not read: the connection's
transport gives the close frame a bounded time and then aborts the socket.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.outlet import Outlet
from gateway.protocol.frames import EventTemplate, encode_event_template, event_template_from_json

Frame = EventTemplate
"""A serialised event waiting for each connection's `seq` (see `EventTemplate`)."""

READ_SCOPE = "operator.read"


def encode_event(
    event: str, payload: Any, *, droppable: bool = False, state_version: Mapping[str, int] | None = None
) -> Frame:
    """Serialise an event once for fan-out."""
    return encode_event_template(event, payload, state_version, droppable=droppable)


def encode_event_json(event: str, payload_json: str, *, droppable: bool = False) -> Frame:
    """`encode_event` for a payload already serialised as compact JSON text."""
    return event_template_from_json(event, payload_json, droppable=droppable)


class Takers(msgspec.Struct, frozen=True):
    """Which wire shapes of a session's events some connection takes right now."""

    native: bool
    """`session.*` frames (a native follower, a replay's hold included)."""
    messages: bool
    """`session.message` frames."""
    compat: bool
    """OpenClaw `agent` / `chat` frames (`Hub.takes_tool_stream` says whether the tool stream)."""


def takes_compat(outlet: Outlet) -> bool:
    """Whether the connection may get OpenClaw `agent`/`chat` frames at all."""
    return READ_SCOPE in outlet.scopes and "native-events-only" not in outlet.caps


class Hub:
    """Registry of outlets and the fan-out of every kind of event."""

    def __init__(self) -> None:
        self.outlets: dict[str, Outlet] = {}
        self.delivered = 0
        """Native session events queued to followers (since start)."""
        self.slow_consumers = 0
        """Connections closed because they fell too far behind (since start)."""
        # Per session id, by connection id: who takes each shape of its events.
        self._native: dict[str, dict[str, Outlet]] = {}
        self._messages: dict[str, dict[str, Outlet]] = {}
        self._compat_scoped: dict[str, dict[str, Outlet]] = {}
        self._key_waiters: dict[str, dict[str, Outlet]] = {}
        self._all_sessions_readers: dict[str, Outlet] = {}
        """Connections that get every session's `agent`/`chat` frames."""
        self._list_readers: dict[str, Outlet] = {}
        """Connections that get `sessions.changed` (subscribed to the list, with read scope)."""

    def __len__(self) -> int:
        return len(self.outlets)

    def register(self, outlet: Outlet) -> None:
        """Make an authenticated outlet reachable by events (its writer is already running)."""
        self.outlets[outlet.conn_id] = outlet
        if takes_compat(outlet) and "session-scoped-events" not in outlet.caps:
            self._all_sessions_readers[outlet.conn_id] = outlet
        outlet.attach(self)

    def remove(self, conn_id: str) -> Outlet | None:
        outlet = self.outlets.pop(conn_id, None)
        self._all_sessions_readers.pop(conn_id, None)
        if outlet is not None:
            outlet.detach()
        return outlet

    def direct_writers(self) -> int:
        """Connections written through the direct writer (the fan-out fast path)."""
        return sum(1 for outlet in self.outlets.values() if outlet.direct_writes)

    def queued_bytes(self) -> tuple[int, int]:
        """Bytes waiting in the open connections' send buffers, and held back by their replays."""
        buffered = sum(outlet.buffered for outlet in self.outlets.values())
        held = sum(outlet.held_bytes() for outlet in self.outlets.values())
        return buffered, held

    def frames_written(self) -> tuple[int, int]:
        """Frames handed to the sockets of the open connections: (direct, through ASGI send)."""
        direct = sum(outlet.written_direct for outlet in self.outlets.values())
        sent = sum(outlet.written_by_send for outlet in self.outlets.values())
        return direct, sent

    # --- the follower index (`gateway.outlet.FollowerIndex`) ---------------------------------

    def following_changed(self, outlet: Outlet, session_id: str) -> None:
        registered = self._registered(outlet)
        _index(self._native, session_id, outlet, registered and outlet.follows_natively(session_id))
        _index(self._messages, session_id, outlet, registered and outlet.wants_messages(session_id))
        scoped = registered and outlet.conn_id not in self._all_sessions_readers and takes_compat(outlet)
        _index(self._compat_scoped, session_id, outlet, scoped and outlet.follows(session_id))

    def key_wait_changed(self, outlet: Outlet, key: str) -> None:
        _index(self._key_waiters, key, outlet, self._registered(outlet) and outlet.waits_for(key))

    def list_changed(self, outlet: Outlet) -> None:
        if self._registered(outlet) and outlet.sessions_list and READ_SCOPE in outlet.scopes:
            self._list_readers[outlet.conn_id] = outlet
        else:
            self._list_readers.pop(outlet.conn_id, None)

    def takes_sessions_changed(self) -> bool:
        """Whether some connection gets `sessions.changed` now."""
        return bool(self._list_readers)

    def _registered(self, outlet: Outlet) -> bool:
        return self.outlets.get(outlet.conn_id) is outlet

    def session_named(self, key: str | None, session_id: str) -> None:
        """`key` names `session_id`: subscriptions made by key before the session existed
        follow it from now on. Call before the session's events are fanned out."""
        if key is None or not self._key_waiters:
            return
        waiting = self._key_waiters.get(key)
        if not waiting:
            return
        for outlet in list(waiting.values()):
            outlet.bind_key(key, session_id)

    # --- fan-out ------------------------------------------------------------------------------

    def broadcast(self, frame: Frame, *, scope: str | None = None) -> None:
        for outlet in list(self.outlets.values()):
            if scope is None or scope in outlet.scopes:
                outlet.send_event(frame)

    def takers(self, session_id: str) -> Takers:
        """Which shapes of `session_id`'s events some connection takes now."""
        return Takers(
            native=session_id in self._native,
            messages=session_id in self._messages,
            compat=bool(self._all_sessions_readers) or session_id in self._compat_scoped,
        )

    def takes_tool_stream(self, session_id: str) -> bool:
        """Whether some taker of the session's `agent` frames has the cap `tool-events`."""
        scoped = self._compat_scoped.get(session_id, {})
        return any("tool-events" in o.caps for o in (*self._all_sessions_readers.values(), *scoped.values()))

    def session_native(self, session_id: str, session_seq: int, frame: Frame) -> None:
        """A durable `session.*` event: to every connection following the session natively."""
        bucket = self._native.get(session_id)
        if not bucket:
            return
        for outlet in list(bucket.values()):
            if outlet.offer_native(session_id, session_seq, frame):
                self.delivered += 1

    def openclaw_stream(self, session_id: str, frame: Frame, *, tool: bool = False) -> None:
        """`agent`/`chat` frames: every reader, or only subscribers for session-scoped clients.
        A connection that declared the cap `native-events-only` gets none (it follows the
        native `session.*` stream, which carries the same information)."""
        scoped = self._compat_scoped.get(session_id)
        for recipients in (self._all_sessions_readers, scoped):
            if not recipients:
                continue
            for outlet in list(recipients.values()):
                if tool and "tool-events" not in outlet.caps:
                    continue
                outlet.send_event(frame)

    def session_message(self, session_id: str, frame: Frame) -> None:
        bucket = self._messages.get(session_id)
        if not bucket:
            return
        for outlet in list(bucket.values()):
            outlet.send_event(frame)

    def sessions_changed(self, frame: Frame) -> None:
        for outlet in list(self._list_readers.values()):
            outlet.send_event(frame)


def _index(table: dict[str, dict[str, Outlet]], name: str, outlet: Outlet, member: bool) -> None:
    bucket = table.get(name)
    if member:
        if bucket is None:
            bucket = table[name] = {}
        bucket[outlet.conn_id] = outlet
    elif bucket is not None:
        bucket.pop(outlet.conn_id, None)
        if not bucket:
            del table[name]
