"""uvicorn's HTTP/1.1 and WebSocket protocols as the gateway runs them: with the front door
(`gateway.door`) at accept, the httptools parser, and the handshake response written together
with the first frame. These subclasses read uvicorn's internals: uvicorn is pinned in
pyproject.toml to the minor version they were written against (`uvicorn_socket.KNOWN_UVICORN`).

The door needs the server because ASGI starts only once a request's head has arrived and
delivers a frame only once all of it has been buffered. `door_protocols` returns the two classes
with a `Door` at accept:

- a connection is refused there when its address holds too many unauthenticated ones;
- its bytes are counted against the pre-auth budget before any parser sees them;
- its deadline runs from accept (through the upgrade, where the WebSocket protocol takes the pass
  over) until `ServerSocket.authenticated` or, for plain HTTP, until a request head has arrived
  (and again from the end of each response until the next head, so a keep-alive connection cannot
  trickle a request in forever);
- an incomplete request head is buffered up to `MAX_HEAD_BYTES`, on every request of a
  kept-alive connection: once the first head has arrived the byte budget no longer applies, and
  httptools itself would buffer a head of any size. A request with two `Host` headers is refused.

The HTTP parser is httptools (C), not h11 (pure Python): the upgrade request of every new
connection is parsed in microseconds. And the `101 Switching Protocols` response is held for
two turns of the event loop, so that the gateway's first frame (the challenge, written by the
connection's writer task on the next turn) goes out in the same socket write: one send and one
wake-up of the client fewer per connection. An application that writes nothing that soon gets
its response alone, two turns late.

Transports are used by what they do, never checked by class (an event loop's transports need
not subclass `asyncio.Transport`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from gateway.door import Door, Pass

CLOSE_GRACE_S = 2.0
"""How long a connection the door closes may take to flush its close frame before it is reset."""
MAX_HEAD_BYTES = 16 * 1024
"""The most bytes of an incomplete request head buffered; past them the request is answered 400."""
PREAUTH_TOO_BIG = (1009, "preauth payload too large")
HANDSHAKE_TIMEOUT = (1008, "handshake timeout")
BAD_REQUEST = "Invalid HTTP request received."


def door_protocols(door: Door) -> tuple[type[DoorHTTPProtocol], type[DoorWebSocketProtocol]]:
    """uvicorn's HTTP/1.1 (httptools) and sans-I/O WebSocket protocol classes with `door` at
    accept; pass them as `uvicorn.Config(http=..., ws=...)`."""
    bound = door

    class HTTP(DoorHTTPProtocol):
        door = bound

    return HTTP, DoorWebSocketProtocol


class _Admission:
    """One connection's door pass and the deadline it runs against, shared by the HTTP and the
    WebSocket protocol (the pass moves from one to the other on upgrade). `on_expired` runs when
    the deadline passes, after the pass was marked expired."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_expired: Callable[[], None]) -> None:
        self.door_pass: Pass | None = None
        self._loop = loop
        self._on_expired = on_expired
        self._deadline: asyncio.TimerHandle | None = None

    def spend(self, size: int) -> bool:
        """Count `size` bytes against the pass's budget; False once it is over (no pass: True)."""
        return self.door_pass is None or self.door_pass.spend(size)

    def arm(self, delay: float) -> None:
        self.disarm()
        self._deadline = self._loop.call_later(delay, self._expired)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def take(self) -> Pass | None:
        """The pass, no longer this admission's (no deadline either)."""
        self.disarm()
        door_pass, self.door_pass = self.door_pass, None
        return door_pass

    def release(self) -> None:
        """Stop the deadline and give the pass back (idempotent)."""
        door_pass = self.take()
        if door_pass is not None:
            door_pass.release()

    def _expired(self) -> None:
        self._deadline = None
        door_pass, self.door_pass = self.door_pass, None
        if door_pass is not None:
            door_pass.expired()
        self._on_expired()


class DoorHTTPProtocol(HttpToolsProtocol):
    """HTTP/1.1 with the door: a pass at accept, released when a request head has arrived or
    handed to the WebSocket protocol on upgrade; the head deadline re-armed after each response;
    an incomplete head capped at `MAX_HEAD_BYTES`."""

    door: ClassVar[Door]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admission = _Admission(self.loop, self._give_up)
        self._upgraded = False
        self._served: object = None
        self._in_head = False
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        door_pass = self.door.admit(self.client[0] if self.client else "?")
        if door_pass is None:
            transport.close()
            return
        self.admission.door_pass = door_pass
        self.admission.arm(door_pass.remaining_s())

    def data_received(self, data: bytes) -> None:
        if not self.admission.spend(len(data)):
            self._give_up()
            return
        super().data_received(data)
        if self._in_head and not self._upgraded:
            # A head still incomplete after this read (httptools buffers a header until it
            # ends, however long): whole reads are counted, so the read it began in may count a
            # few bytes of what came before it. A head that arrives whole in one read is parsed
            # at once, whatever its size (one read is at most the transport's read size).
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.send_400_response(BAD_REQUEST)
                return
        self._head_arrived()

    # httptools' callbacks, which run inside `super().data_received`.

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        # Two `Host` headers leave open which name the request is for (the allowed-hosts check
        # reads the first). Raising here makes httptools report a parse error, which uvicorn
        # answers with 400.
        if sum(1 for name, _ in self.headers if name == b"host") > 1:
            raise ValueError("more than one Host header")
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self._head_arrived() or self._upgraded or self.transport.is_closing():
            return
        self.admission.arm(self.door.settings.handshake_timeout_s)

    def handle_websocket_upgrade(self) -> None:
        self._upgraded = True
        self.admission.disarm()
        if self.admission.door_pass is None:
            # An upgrade after plain requests on a kept-alive connection: a pass of its own.
            self.admission.door_pass = self.door.admit(self.client[0] if self.client else "?")
            if self.admission.door_pass is None:
                self._give_up()
                return
        super().handle_websocket_upgrade()

    def _head_arrived(self) -> bool:
        """Whether a plain request's head arrived since the last check (its response is under
        way, so the deadline is met and the pass goes back)."""
        if self._upgraded or self.cycle is self._served:
            return False
        self._served = self.cycle
        self.admission.release()
        return True

    def hand_over(self) -> Pass | None:
        """The pass, for the WebSocket protocol that takes this connection over."""
        return self.admission.take()

    def connection_lost(self, exc: Exception | None) -> None:
        self.admission.release()
        super().connection_lost(exc)

    def _give_up(self) -> None:
        """Close a connection that owes nothing (no response under way)."""
        self.admission.release()
        self.transport.close()
        self.loop.call_later(CLOSE_GRACE_S, self.transport.abort)


class DoorWebSocketProtocol(WebSocketsSansIOProtocol):
    """The sans-I/O WebSocket protocol with the door: it takes the upgraded connection's pass
    over and holds it until `authenticated()`; bytes over the budget close the connection with
    1009 unparsed, the deadline with 1008 "handshake timeout". Its handshake response is written
    with the application's first frame when that follows within two turns of the loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admission = _Admission(self.loop, lambda: self._refuse(*HANDSHAKE_TIMEOUT))
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # uvicorn's HTTP protocol calls this before it hands the transport over, so the
        # transport still names it. (uvloop's transports are no `asyncio.Transport`.)
        get_protocol = getattr(transport, "get_protocol", None)
        previous = get_protocol() if get_protocol is not None else None
        if isinstance(previous, DoorHTTPProtocol):
            self.admission.door_pass = previous.hand_over()
        if self.admission.door_pass is not None:
            self.admission.arm(self.admission.door_pass.remaining_s())

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self.admission.spend(len(data)):
            self._refuse(*PREAUTH_TOO_BIG)
            return
        super().data_received(data)

    async def send(self, message: Any) -> None:
        if message["type"] != "websocket.accept" or self.handshake_complete:
            await super().send(message)
            return
        held = _HeldWrites(self.transport)
        self.transport = cast(asyncio.Transport, held)
        try:
            await super().send(message)
        finally:
            held.release()
            # Two turns: the application's first frame is written by a task it wakes as it goes
            # on from the accept, which runs on the next turn.
            self.loop.call_soon(self.loop.call_soon, self._stop_holding, held)

    def _stop_holding(self, held: _HeldWrites) -> None:
        if self.transport is cast(asyncio.Transport, held):
            self.transport = held.transport
        held.flush()

    def authenticated(self) -> None:
        """The connection authenticated: no deadline, no byte budget from now on."""
        self.admission.release()

    def connection_lost(self, exc: Exception | None) -> None:
        self.admission.release()
        super().connection_lost(exc)

    def _refuse(self, code: int, reason: str) -> None:
        """Close with `code` (a close frame when the WebSocket is open, else just the socket),
        tell the application, and reset the socket if the peer does not take the close."""
        self._refused = True
        self.admission.release()
        transport = self.transport
        if transport.is_closing():
            return
        if self.handshake_complete and not self.close_sent and self.conn.state is State.OPEN:
            self.conn.send_close(code, reason)
            transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        transport.close()
        self.loop.call_later(CLOSE_GRACE_S, transport.abort)


class _HeldWrites:
    """Stands in for a connection's transport while the WebSocket handshake response is held:
    what is written is kept until `release()`; from then on the next write takes it along, in
    one write to the socket (`flush()` writes it in any case). Everything else goes to the
    transport."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._held: list[bytes] = []
        self._holding = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._held.append(bytes(data))
        if not self._holding:
            self.flush()

    def writelines(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(chunks))

    def release(self) -> None:
        self._holding = False

    def flush(self) -> None:
        self._holding = False
        held, self._held = self._held, []
        if held and not self.transport.is_closing():
            self.transport.write(b"".join(held))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._held = []
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)
