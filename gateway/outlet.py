"""`Outlet`: one connection's side of the hub: its send buffer (`gateway.send_buffer`) and what
it follows.

Subscriptions (each lives until it is cancelled or the connection closes):

- native: session id -> highest `sessionSeq` delivered; an older live event is not sent again;
- holds: while a resume replay of a session runs (`hold`, `replay`, `release`), the session's
  live native events are held back, within the bound and policy of the send buffer: a
  droppable event that does not fit is dropped and its `seq` consumed on release (the gap is
  visible), anything else that does not fit closes the connection with 1008 "slow consumer";
  releasing a hold moves its frames into the buffer under that same bound;
- messages: sessions whose `session.message` frames the connection wants;
- keys: subscriptions by session key to a key no session has used yet, and subscribe calls
  still looking a key up (`gateway.key_subscriptions`); they become session subscriptions when
  the hub learns which session the key names (`bind_key`);
- the session list (`sessions_list`): whether it gets `sessions.changed`.

The hub keeps an index of who follows what; an outlet reports each change to it (`attach`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

import msgspec

from gateway.background import Background
from gateway.key_subscriptions import KeyLookup, KeySubscriptions
from gateway.protocol.codes import CloseCode
from gateway.protocol.frames import EventTemplate
from gateway.replay import EventPages, run_replay
from gateway.send_buffer import SendBuffer, Transport

DROPPED_MARK_BYTES = 64
"""What a dropped held event counts against the hold's bound (its place in the order is kept)."""


class FollowerIndex(Protocol):
    """The hub's index of followers, told of every change once the outlet is attached."""

    def following_changed(self, outlet: Outlet, session_id: str) -> None: ...

    def key_wait_changed(self, outlet: Outlet, key: str) -> None: ...

    def list_changed(self, outlet: Outlet) -> None: ...


class Hold(msgspec.Struct, eq=False, dict=True):
    """Live native events of one session held back while its replay runs (oldest first; a None
    frame marks a droppable event dropped for lack of room)."""

    session_id: str
    frames: list[tuple[int, EventTemplate | None]] = msgspec.field(default_factory=list)
    size: int = 0


class Outlet(SendBuffer):
    """One connection's send buffer, writer and subscriptions. `start()` the writer, `aclose()`
    at the end; `kill()` closes the connection from the gateway's side."""

    def __init__(
        self,
        conn_id: str,
        transport: Transport,
        max_buffered_bytes: int,
        *,
        on_close: Callable[[int, str], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        super().__init__(conn_id, transport, max_buffered_bytes, on_close=on_close)
        self.scopes: frozenset[str] = frozenset()
        self.caps: frozenset[str] = frozenset()
        self._sessions_list = False
        self._replays = Background(f"replays of {conn_id}")
        self._native: dict[str, int] = {}
        self._holds: dict[str, Hold] = {}
        self._messages: set[str] = set()
        self._keys = KeySubscriptions()
        self._index: FollowerIndex | None = None

    @property
    def sessions_list(self) -> bool:
        """Whether the connection gets `sessions.changed` (`sessions.subscribe`)."""
        return self._sessions_list

    @sessions_list.setter
    def sessions_list(self, value: bool) -> None:
        self._sessions_list = value
        if self._index is not None:
            self._index.list_changed(self)

    def grant(self, scopes: frozenset[str], caps: frozenset[str]) -> None:
        """What the handshake granted: decides which events the hub routes here."""
        self.scopes = scopes
        self.caps = caps

    async def aclose(self) -> None:
        """Stop the replays and the writer, and finish a close `kill` started. Idempotent."""
        self.closed = True
        self._room.set()
        await self._replays.aclose()
        await super().aclose()

    # --- native session events ----------------------------------------------------------------

    async def wait_for_room(self, size: int, hold: Hold) -> bool:
        """Wait until `size` more bytes fit in the buffer (or it is empty). False when the
        connection closed or `hold` is no longer the session's current subscription."""
        while self._current(hold) and self._queue and self.buffered + size > self.max_buffered_bytes:
            self._room.clear()
            await self._room.wait()
        return self._current(hold)

    def follow_events(self, session_id: str, after_seq: int) -> None:
        """Follow the session's native events after `after_seq`, live (no replay). Replaces
        any subscription to that session, a replay in progress included."""
        self._holds.pop(session_id, None)
        self._native[session_id] = after_seq
        self._room.set()
        self._changed(session_id)

    def hold(self, session_id: str, after_seq: int) -> Hold:
        """Follow the session natively, holding its live events back until `release` (a
        replay runs meanwhile). Replaces any subscription to that session."""
        hold = Hold(session_id)
        self._holds[session_id] = hold
        self._native[session_id] = after_seq
        self._room.set()  # a replay of the hold this one replaces notices and stops
        self._changed(session_id)
        return hold

    def replay(self, hold: Hold, pages: EventPages, *, after: int, until: int) -> None:
        """Send the stored events in (`after`, `until`] paced by the client's reading, then
        `release` the hold. The task belongs to this outlet and ends with it."""
        self._replays.spawn(
            run_replay(_ReplayTarget(self, hold), pages, after=after, until=until),
            name=f"replay-{self.conn_id}-{hold.session_id}",
        )

    def release(self, hold: Hold, delivered: int) -> None:
        """End a replay that delivered up to `delivered`: send the held live events it did not
        cover, then let live events through. Does nothing when a newer subscription or an
        unsubscribe replaced `hold`."""
        if not self._current(hold):
            return
        del self._holds[hold.session_id]
        for seq, frame in hold.frames:
            if seq <= delivered:
                continue
            if frame is None:
                self._skip_seq()
            else:
                self.send_event(frame)
            delivered = seq
        self._native[hold.session_id] = max(delivered, self._native.get(hold.session_id, 0))

    def abandon(self, hold: Hold) -> None:
        """Drop a subscription whose replay never started (its set-up failed), unless a newer
        subscription replaced it."""
        if self._holds.get(hold.session_id) is hold:
            self.unfollow_events(hold.session_id)

    def unfollow_events(self, session_id: str) -> None:
        self._native.pop(session_id, None)
        self._holds.pop(session_id, None)
        self._room.set()
        self._changed(session_id)

    def offer_native(self, session_id: str, session_seq: int, frame: EventTemplate) -> bool:
        """A live native event of a session: sent when followed and new, held during a replay.
        True when it was queued now."""
        last = self._native.get(session_id)
        if last is None or self.closed:
            return False
        hold = self._holds.get(session_id)
        if hold is not None:
            self._hold_frame(hold, session_seq, frame)
            return False
        if session_seq <= last:
            return False
        self._native[session_id] = session_seq
        self.send_event(frame)
        return True

    def _hold_frame(self, hold: Hold, session_seq: int, frame: EventTemplate) -> None:
        size = frame.byte_size(self.seq)
        if hold.size + size <= self.max_buffered_bytes:
            hold.frames.append((session_seq, frame))
            hold.size += size
        elif frame.droppable and hold.size + DROPPED_MARK_BYTES <= self.max_buffered_bytes:
            hold.frames.append((session_seq, None))
            hold.size += DROPPED_MARK_BYTES
        else:
            self.kill(CloseCode.POLICY_VIOLATION, "slow consumer")

    def held_bytes(self) -> int:
        """Bytes of live events held back by replays in progress."""
        return sum(hold.size for hold in self._holds.values())

    def _current(self, hold: Hold) -> bool:
        return not self.closed and self._holds.get(hold.session_id) is hold

    # --- session.message ----------------------------------------------------------------------

    def follow_messages(self, session_id: str) -> None:
        self._messages.add(session_id)
        self._changed(session_id)

    def unfollow_messages(self, session_id: str) -> None:
        self._messages.discard(session_id)
        self._changed(session_id)

    def wants_messages(self, session_id: str) -> bool:
        return session_id in self._messages

    # --- keys no session has used yet -----------------------------------------------------------

    def wait_for_key(self, key: str, *, events_after: int | None = None, messages: bool = False) -> bool:
        """Subscribe by key before a session uses it: native events after `events_after`,
        and/or `session.message` frames, from the session the key will name. False (nothing
        changed) when the connection already waits on `KEY_WAIT_LIMIT` other keys."""
        if not self._keys.wait(key, events_after=events_after, messages=messages):
            return False
        self._key_changed(key)
        return True

    def stop_waiting(self, key: str, *, events: bool = False, messages: bool = False) -> bool:
        """Cancel part of a key subscription; True when there was one to cancel."""
        had = self._keys.stop(key, events=events, messages=messages)
        self._key_changed(key)
        return had

    def begin_key_lookup(self, key: str) -> KeyLookup | None:
        """A subscribe call starts looking `key` up: until `end_key_lookup`, a session the key
        comes to name is followed with its live events held (`gateway.key_subscriptions`). None
        (nothing changed) when the connection already waits on `KEY_WAIT_LIMIT` other keys."""
        lookup = self._keys.begin_lookup(key)
        if lookup is not None:
            self._key_changed(key)
        return lookup

    def end_key_lookup(self, lookup: KeyLookup) -> str | None:
        """The look-up is over: the session the key came to name meanwhile, else None. With a
        session, the caller must resume it (`hold` replaces `lookup.hold`) or `abandon` the hold."""
        self._keys.end_lookup(lookup)
        self._key_changed(lookup.key)
        return lookup.session_id

    def bind_key(self, key: str, session_id: str) -> None:
        """The key now names `session_id`: its key subscriptions become session subscriptions,
        held for the calls still looking the key up."""
        wait, lookups = self._keys.take(key)
        if lookups:
            hold = self.hold(session_id, 0) if session_id not in self._native else None
            for lookup in lookups:
                lookup.session_id, lookup.hold = session_id, hold
        if wait is not None:
            if wait.events_after is not None and session_id not in self._native:
                self.follow_events(session_id, wait.events_after)
            if wait.messages:
                self.follow_messages(session_id)
        self._key_changed(key)

    def waits_for(self, key: str) -> bool:
        return key in self._keys

    # --- the hub's index ----------------------------------------------------------------------

    def follows(self, session_id: str) -> bool:
        """Whether the outlet follows the session in any way (native events or messages)."""
        return session_id in self._native or session_id in self._messages

    def follows_natively(self, session_id: str) -> bool:
        """Whether the outlet follows the session's native events (live, or held for a replay)."""
        return session_id in self._native

    def followed_sessions(self) -> Iterable[str]:
        return set(self._native) | self._messages

    def attach(self, index: FollowerIndex) -> None:
        """Report subscriptions to `index` from now on (and the ones made so far)."""
        self._index = index
        for session_id in self.followed_sessions():
            index.following_changed(self, session_id)
        for key in self._keys.waited():
            index.key_wait_changed(self, key)
        index.list_changed(self)

    def detach(self) -> None:
        """Stop reporting; the index is told of every subscription once more (to drop them)."""
        index, self._index = self._index, None
        if index is None:
            return
        for session_id in self.followed_sessions():
            index.following_changed(self, session_id)
        for key in self._keys.waited():
            index.key_wait_changed(self, key)
        index.list_changed(self)

    def _changed(self, session_id: str) -> None:
        if self._index is not None:
            self._index.following_changed(self, session_id)

    def _key_changed(self, key: str) -> None:
        if self._index is not None:
            self._index.key_wait_changed(self, key)


class _ReplayTarget:
    """The outlet as one replay sees it: bound to the replay's hold."""

    def __init__(self, outlet: Outlet, hold: Hold) -> None:
        self._outlet = outlet
        self._hold = hold
        self.conn_id = outlet.conn_id
        self.session_id = hold.session_id

    async def wait_for_room(self, size: int) -> bool:
        return await self._outlet.wait_for_room(size, self._hold)

    def send(self, frame: EventTemplate) -> None:
        self._outlet.send_event(frame)

    def release(self, delivered: int) -> None:
        self._outlet.release(self._hold, delivered)

    def fail(self, code: int, reason: str) -> None:
        self._outlet.kill(code, reason)
