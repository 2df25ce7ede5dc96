"""The hub: fan-out of events to connections.

Each event is serialised once; every recipient gets the same text with only its per-connection
`seq` spliced in. Each connection has a bounded send buffer (`max_buffered_bytes`) drained by one
writer task. A consumer that falls behind never stalls a session or the other clients:

- a droppable event (text/thinking/tool-call deltas, tool progress, most list notifications)
  that does not fit is dropped, but still consumes its `seq`, so the gap is visible;
- a non-droppable event that does not fit closes the connection with 1008 "slow consumer".

Durable session events can always be recovered with `sessions.events.subscribe {afterSeq}`.

Back-pressure below the hub: uvicorn's WebSocket `send` waits while the socket's transport is
paused (its write buffer is over the 64 KiB high-water mark), so a client that stops reading
blocks only its own writer task, never the hub. A `websocket.close` waits behind that same
pause, so closing a stuck connection politely can block for as long as the client does not read:
`Transport.close` therefore gives the close frame a bounded time and then aborts the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

log = structlog.get_logger("gateway.hub")

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class Transport(Protocol):
    """What the hub needs of a WebSocket: send text, close with a code."""

    async def send_text(self, data: str) -> None: ...

    def write_now(self, texts: list[str]) -> bool:
        """Write these frames at once without waiting, or return False having written nothing
        (the caller then uses `send_text`, which waits for the socket)."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame and end the connection; must return in bounded time even when
        the peer does not read (then the connection is dropped without the frame)."""
        ...


@dataclass(frozen=True, slots=True)
class Frame:
    """A pre-serialised event frame without its `seq`: `head` ends just before the closing
    brace, so `head + ',"seq":N}'` is the full frame."""

    head: str
    droppable: bool = False

    def with_seq(self, seq: int) -> str:
        return f'{self.head},"seq":{seq}}}'

    @property
    def size(self) -> int:
        return len(self.head) + 16


def encode_event(event: str, payload: Any, *, droppable: bool = False, state_version: Any = None) -> Frame:
    head = '{"type":"event","event":' + _dumps(event) + ',"payload":' + _dumps(payload)
    if state_version is not None:
        head += ',"stateVersion":' + _dumps(state_version)
    return Frame(head, droppable)


class _TrackedDict(dict[str, int]):
    """`{session id: last sessionSeq}` that reports which keys come and go (for the hub's index)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_change: Callable[[str], None] | None = None

    def __setitem__(self, key: str, value: int) -> None:
        new = key not in self
        super().__setitem__(key, value)
        if new and self.on_change is not None:
            self.on_change(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        if self.on_change is not None:
            self.on_change(key)

    def pop(self, key: str, *default: Any) -> Any:
        had = key in self
        value = super().pop(key, *default)
        if had and self.on_change is not None:
            self.on_change(key)
        return value


class _TrackedSet(set[str]):
    """A set of session ids that reports additions and removals (for the hub's index)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_change: Callable[[str], None] | None = None

    def add(self, key: str) -> None:
        new = key not in self
        super().add(key)
        if new and self.on_change is not None:
            self.on_change(key)

    def discard(self, key: object) -> None:
        had = key in self
        super().discard(key)
        if had and isinstance(key, str) and self.on_change is not None:
            self.on_change(key)


@dataclass(eq=False)
class Outlet:
    """One connection's side of the hub: its seq counter, buffer, writer and subscriptions."""

    conn_id: str
    transport: Transport
    max_buffered_bytes: int
    scopes: frozenset[str] = frozenset()
    caps: frozenset[str] = frozenset()
    seq: int = 0
    buffered: int = 0
    dropped: int = 0
    closed: bool = False
    queue: deque[str] = field(default_factory=deque)
    event_sessions: dict[str, int] = field(default_factory=_TrackedDict)
    """Sessions this connection follows natively -> highest sessionSeq already delivered."""
    held: dict[str, list[tuple[int, Frame]]] = field(default_factory=dict)
    """Live native events held back while a resume replay for that session is in progress."""
    message_sessions: set[str] = field(default_factory=_TrackedSet)
    sessions_list: bool = False
    close_code: int | None = None
    """Why the hub closed the connection (1008 slow consumer, ...); None while open."""
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _sending: bool = False
    _writer: asyncio.Task[None] | None = None
    _closer: asyncio.Task[None] | None = None
    on_close: Callable[[int, str], Coroutine[Any, Any, None]] | None = None

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.conn_id}")

    def send_response(self, text: str) -> None:
        """Responses are never dropped; they count against the buffer like events."""
        self._push(text, droppable=False)

    def send_event(self, frame: Frame) -> None:
        if self.closed:
            return
        self.seq += 1
        self._push(frame.with_seq(self.seq), droppable=frame.droppable)

    def send_raw(self, text: str) -> None:
        """A frame without seq (the challenge)."""
        self._push(text, droppable=False)

    def _push(self, text: str, *, droppable: bool) -> None:
        if self.closed:
            return
        size = len(text)
        if self.buffered + size > self.max_buffered_bytes and self.queue:
            if droppable:
                self.dropped += 1
                return
            self.kill(1008, "slow consumer")
            return
        self.queue.append(text)
        self.buffered += size
        self._wake.set()

    def kill(self, code: int, reason: str) -> None:
        """Close now: stop writing, drop the buffer, close the socket in the background (the
        outlet owns that task; `aclose` waits for it).

        Cancelling the writer is safe mid-send: uvicorn writes a frame synchronously once the
        transport is writable, so a cancelled send has written all of its frame or none of it.
        """
        if self.closed:
            return
        self.closed = True
        self.close_code = code
        self.queue.clear()
        self.buffered = 0
        self._wake.set()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        if code == 1008:
            log.warning("closing a slow consumer", conn_id=self.conn_id, reason=reason, dropped=self.dropped)
        if self.on_close is not None:
            self._closer = asyncio.create_task(self.on_close(code, reason), name=f"close-{self.conn_id}")

    async def drain(self, timeout: float = 2.0) -> None:
        """Wait until everything queued has been handed to the socket, the frame being sent
        included (or `timeout`). Call before closing, so the last frames go out before the close."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while (self.queue or self._sending) and not self.closed and loop.time() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        """Stop the writer and finish a close `kill` started. Idempotent."""
        self.closed = True
        self._wake.set()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
            self._writer = None
        if self._closer is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._closer
            self._closer = None

    def _write_batch(self) -> bool:
        """Hand every queued frame (up to a bound) to the socket in one write when it can take
        them now; False when it cannot (nothing is taken from the queue then)."""
        write_now = getattr(self.transport, "write_now", None)
        if write_now is None:
            return False
        count = min(len(self.queue), 512)
        batch = [self.queue[i] for i in range(count)]
        if not write_now(batch):
            return False
        for _ in range(count):
            self.buffered -= len(self.queue.popleft())
        return True

    async def _write_loop(self) -> None:
        try:
            while not self.closed:
                if not self.queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if len(self.queue) > 0 and self._write_batch():
                    continue
                text = self.queue.popleft()
                self.buffered -= len(text)
                self._sending = True
                try:
                    await self.transport.send_text(text)
                finally:
                    self._sending = False
        except asyncio.CancelledError:
            raise
        except Exception:
            # The socket went away; the connection handler notices and cleans up.
            self.closed = True
            self.queue.clear()
            self.buffered = 0


class Hub:
    """Registry of outlets and the fan-out of every kind of event."""

    def __init__(self) -> None:
        self.outlets: dict[str, Outlet] = {}
        self.delivered = 0
        self.slow_consumers = 0
        """Connections closed because they fell too far behind (since start)."""
        # Indexes, so routing an event costs O(its recipients), not O(all connections):
        # session id -> outlets following it (native events or messages), and the readers that
        # get every session's `agent`/`chat` frames (no `session-scoped-events` cap).
        self._followers: dict[str, dict[str, Outlet]] = {}
        self._all_sessions_readers: dict[str, Outlet] = {}

    def register(self, outlet: Outlet) -> None:
        """Make an authenticated outlet reachable by events (its writer is already running)."""
        self.outlets[outlet.conn_id] = outlet
        if "operator.read" in outlet.scopes and "session-scoped-events" not in outlet.caps:
            self._all_sessions_readers[outlet.conn_id] = outlet
        for container in (outlet.event_sessions, outlet.message_sessions):
            if isinstance(container, _TrackedDict | _TrackedSet):
                container.on_change = lambda sid, o=outlet: self._reindex(o, sid)
        for session_id in set(outlet.event_sessions) | set(outlet.message_sessions):
            self._reindex(outlet, session_id)

    def _reindex(self, outlet: Outlet, session_id: str) -> None:
        following = session_id in outlet.event_sessions or session_id in outlet.message_sessions
        bucket = self._followers.get(session_id)
        if following and outlet.conn_id in self.outlets:
            if bucket is None:
                bucket = self._followers[session_id] = {}
            bucket[outlet.conn_id] = outlet
        elif bucket is not None:
            bucket.pop(outlet.conn_id, None)
            if not bucket:
                del self._followers[session_id]

    def remove(self, conn_id: str) -> Outlet | None:
        outlet = self.outlets.pop(conn_id, None)
        self._all_sessions_readers.pop(conn_id, None)
        if outlet is not None:
            for session_id in set(outlet.event_sessions) | set(outlet.message_sessions):
                self._reindex(outlet, session_id)
        return outlet

    def __len__(self) -> int:
        return len(self.outlets)

    def broadcast(self, frame: Frame, *, scope: str | None = None) -> None:
        for outlet in list(self.outlets.values()):
            if scope is None or scope in outlet.scopes:
                outlet.send_event(frame)

    def session_native(self, session_id: str, session_seq: int, frame: Frame) -> None:
        """A durable `session.*` event: to every connection following the session."""
        bucket = self._followers.get(session_id)
        if not bucket:
            return
        for outlet in list(bucket.values()):
            last = outlet.event_sessions.get(session_id)
            if last is None:
                continue
            held = outlet.held.get(session_id)
            if held is not None:
                held.append((session_seq, frame))
                continue
            if session_seq <= last:
                continue
            outlet.event_sessions[session_id] = session_seq
            outlet.send_event(frame)
            self.delivered += 1

    def openclaw_stream(self, session_id: str, frame: Frame, *, tool: bool = False) -> None:
        """`agent`/`chat` frames: every reader, or only subscribers for session-scoped clients.
        A connection that declared the cap `native-events-only` gets none (it follows the
        native `session.*` stream, which carries the same information)."""
        bucket = self._followers.get(session_id)
        recipients = dict(self._all_sessions_readers)
        if bucket:
            recipients.update(bucket)
        for outlet in list(recipients.values()):
            if "operator.read" not in outlet.scopes or "native-events-only" in outlet.caps:
                continue
            if tool and "tool-events" not in outlet.caps:
                continue
            outlet.send_event(frame)

    def session_message(self, session_id: str, frame: Frame) -> None:
        bucket = self._followers.get(session_id)
        if not bucket:
            return
        for outlet in list(bucket.values()):
            if session_id in outlet.message_sessions:
                outlet.send_event(frame)

    def sessions_changed(self, frame: Frame) -> None:
        for outlet in list(self.outlets.values()):
            if outlet.sessions_list and "operator.read" in outlet.scopes:
                outlet.send_event(frame)
