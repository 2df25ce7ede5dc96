"""`SendBuffer`: one connection's bounded send buffer, its event `seq` and its writer task.

Everything the gateway sends to a connection (responses and events) is queued in one buffer of
at most `max_buffered_bytes` (UTF-8 JSON) and written by one writer task. An event waits as the
shared template and this connection's `seq` (its text is made when it is written), so a large
frame fanned out to many connections is held once, not once per connection. When a frame does
not fit and the buffer is not empty:

- a droppable event (see `EventTemplate.droppable`) is dropped; it still consumes its `seq`, so
  the client sees the gap;
- anything else closes the connection with 1008 "slow consumer".

The writer hands the socket every queued frame it can take in one write when the server's
internals are recognised (`Transport.write_now`, see `gateway.uvicorn_socket`), else one frame at
a time through ASGI `send`, which waits while the socket is paused: a client that stops reading
blocks only its own writer. A write that fails is logged; the connection then ends.

`gateway.outlet.Outlet` is a `SendBuffer` with the connection's subscriptions; the events it
holds back during a replay count against the same bound and policy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import structlog

from gateway.background import Background
from gateway.errors import TransportClosed
from gateway.protocol.codes import CloseCode
from gateway.protocol.frames import EventTemplate

log = structlog.get_logger("gateway.outlet")

DIRECT_BATCH = 512
"""Most frames handed to the socket in one direct write."""


class Transport(Protocol):
    """What an outlet needs of a WebSocket."""

    @property
    def direct(self) -> bool:
        """Whether `write_now` can write (the server's internals are recognised)."""
        ...

    async def send_text(self, data: str) -> None:
        """Send one text frame, waiting while the socket is paused. Raises TransportClosed when
        the peer is gone."""
        ...

    def write_now(self, texts: Sequence[str]) -> bool:
        """Write these frames at once without waiting, or return False having written nothing
        (the caller then uses `send_text`)."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame and end the connection; returns in bounded time even when the
        peer does not read (the connection is then dropped without the frame)."""
        ...


class SendBuffer:
    """One connection's send buffer and writer. `start()` the writer, `aclose()` at the end;
    `kill()` closes the connection from the gateway's side."""

    def __init__(
        self,
        conn_id: str,
        transport: Transport,
        max_buffered_bytes: int,
        *,
        on_close: Callable[[int, str], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.transport = transport
        self.max_buffered_bytes = max_buffered_bytes
        self.seq = 0
        """The last event `seq` given on this connection."""
        self.buffered = 0
        """Bytes queued and not yet handed to the socket."""
        self.dropped = 0
        """Droppable events dropped for this connection (their `seq`s are gaps)."""
        self.written_direct = 0
        self.written_by_send = 0
        """Frames handed to the socket by `write_now` and by `send_text`."""
        self.closed = False
        self.close_code: int | None = None
        """Why the gateway closed the connection (1008 slow consumer, ...); None otherwise."""
        self._on_close = on_close
        self._queue: deque[tuple[str | EventTemplate, int, int]] = deque()
        """(response text or event template, the event's `seq`, UTF-8 size), oldest first."""
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._sending = False
        self._writer: asyncio.Task[None] | None = None
        self._closing = Background(f"close of {conn_id}")

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the writer. Call once, from the running event loop."""
        self._writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.conn_id}")

    def kill(self, code: int, reason: str) -> None:
        """Close now: stop writing, drop the buffer, and close the socket in the background
        (`aclose` waits for that); replays notice `closed` and stop. Idempotent.

        Cancelling the writer is safe mid-send: uvicorn writes a frame synchronously once the
        socket is writable, so a cancelled send has written all of its frame or none of it.
        """
        if self.closed:
            return
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()
        self._shut(code, reason)

    def _shut(self, code: int | None, reason: str) -> None:
        self.closed = True
        self.close_code = code
        self._queue.clear()
        self.buffered = 0
        self._wake.set()
        self._room.set()
        if code == CloseCode.POLICY_VIOLATION:
            log.warning("closing a slow consumer", conn_id=self.conn_id, reason=reason, dropped=self.dropped)
        if code is not None and self._on_close is not None:
            self._closing.spawn(self._on_close(code, reason), name=f"close-{self.conn_id}")

    async def drain(self, timeout: float = 2.0) -> None:
        """Wait until everything queued has been handed to the socket, the frame being sent
        included (or `timeout`). Call before closing, so the last frames go out first."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while (self._queue or self._sending) and not self.closed and loop.time() < end:
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), timeout=max(0.0, end - loop.time()))

    async def aclose(self) -> None:
        """Stop the writer and finish a close `kill` started. Idempotent."""
        self.closed = True
        self._wake.set()
        self._room.set()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        await self._closing.join()

    # --- sending ------------------------------------------------------------------------------
    @property
    def direct_writes(self) -> bool:
        """Whether frames go to the socket through the direct writer (the fan-out fast path)."""
        return self.transport.direct

    def send_response(self, text: str) -> None:
        """Queue a response. Responses are never dropped; they count against the buffer."""
        self._push(text, 0, _utf8_size(text), droppable=False)

    def send_raw(self, text: str) -> None:
        """Queue a frame without `seq` (the challenge)."""
        self._push(text, 0, _utf8_size(text), droppable=False)

    def send_event(self, frame: EventTemplate) -> None:
        """Give the event this connection's next `seq` and queue it (see the overflow policy)."""
        if self.closed:
            return
        self.seq += 1
        self._push(frame, self.seq, frame.byte_size(self.seq), droppable=frame.droppable)

    def _push(self, item: str | EventTemplate, seq: int, size: int, *, droppable: bool) -> None:
        if self.closed:
            return
        if self.buffered + size > self.max_buffered_bytes and self._queue:
            if droppable:
                self.dropped += 1
                return
            self.kill(CloseCode.POLICY_VIOLATION, "slow consumer")
            return
        self._queue.append((item, seq, size))
        self.buffered += size
        self._wake.set()

    def _skip_seq(self) -> None:
        """An event dropped before it was queued: its `seq` is consumed, the gap is the mark."""
        self.seq += 1
        self.dropped += 1

    async def _write_loop(self) -> None:
        try:
            while not self.closed:
                if not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self._write_direct():
                    continue
                item, seq, size = self._queue.popleft()
                text = _text(item, seq)
                self.buffered -= size
                self._room.set()
                self._sending = True
                try:
                    await self.transport.send_text(text)
                finally:
                    self._sending = False
                    self._room.set()
                self.written_by_send += 1
        except asyncio.CancelledError:
            raise
        except TransportClosed:
            log.info("connection went away while writing", conn_id=self.conn_id, queued=len(self._queue))
            self._shut(None, "gone")
        except Exception:
            log.exception("writing to a connection failed; closing it", conn_id=self.conn_id)
            self._shut(CloseCode.INTERNAL_ERROR, "internal error")

    def _write_direct(self) -> bool:
        """Hand every queued frame (up to a bound) to the socket in one write when it can take
        them now; False when it cannot (nothing is taken from the queue then)."""
        queue = self._queue
        count = min(len(queue), DIRECT_BATCH)
        if not self.transport.write_now([_text(queue[i][0], queue[i][1]) for i in range(count)]):
            return False
        for _ in range(count):
            self.buffered -= queue.popleft()[2]
        self.written_direct += count
        self._room.set()
        return True


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _text(item: str | EventTemplate, seq: int) -> str:
    """A queued frame's text: a response as it is, an event with its `seq` spliced in."""
    return item if isinstance(item, str) else item.with_seq(seq)
