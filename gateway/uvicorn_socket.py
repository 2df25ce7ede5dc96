"""The one module that knows uvicorn's internals (uvicorn is pinned in pyproject.toml to the
minor version this code was written against, `KNOWN_UVICORN`).

ASGI gives an application one way to write (`send`, one frame at a time, waiting while the socket
is paused) and no way to drop a connection. The gateway needs two more things from the server for
each WebSocket:

- the fan-out fast path: encode several frames with the server's own sans-I/O WebSocket protocol
  object and write them to the socket in one call, without a task switch per frame, while the
  socket takes data without waiting (`ServerSocket.write_now`);
- the stuck-socket abort: a client that stops reading blocks `websocket.close` until it reads
  again, so a connection the gateway gives up on is reset instead (`ServerSocket.abort`).

`ExposeServerSocket` (ASGI middleware) puts a `ServerSocket` into each WebSocket scope when the
server's `send` is a method of uvicorn's `websockets-sansio` protocol object of the known version;
`server_socket(scope)` returns it, or None when the internals are not recognised (another server,
another uvicorn version, a middleware that wraps `send`). Callers then fall back to plain ASGI:
`send` for every frame and a close that may wait for the client.

The front door (`gateway.door`) needs the server too, because ASGI starts only once a request's
head has arrived and delivers a frame only once all of it has been buffered. `door_protocols`
returns uvicorn's HTTP/1.1 and sans-I/O WebSocket protocols with a `Door` at accept: a connection
is refused there when its address holds too many unauthenticated ones; its bytes are counted
against the pre-auth budget before any parser sees them; its deadline runs from accept (through
the upgrade, where the WebSocket protocol takes the pass over) until `ServerSocket.authenticated`
or, for plain HTTP, until a request head has arrived (and again from the end of each response
until the next head, so a keep-alive connection cannot trickle a request in forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import h11
import structlog
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from gateway.door import Door, Pass

log = structlog.get_logger("gateway.uvicorn_socket")

KNOWN_UVICORN = (0, 54)
"""The uvicorn minor version whose `WebSocketsSansIOProtocol` this module reads."""

SCOPE_KEY = "gateway.server_socket"
"""Scope key of the connection's `ServerSocket` (absent when the server is not recognised)."""

CLOSE_GRACE_S = 2.0
"""How long a connection the door closes may take to flush its close frame before it is reset."""
PREAUTH_TOO_BIG = (1009, "preauth payload too large")
HANDSHAKE_TIMEOUT = (1008, "handshake timeout")

_reported: set[str] = set()


class ServerSocket:
    """Direct access to uvicorn's protocol object of one WebSocket connection."""

    def __init__(self, protocol: WebSocketsSansIOProtocol) -> None:
        self._protocol = protocol

    def write_now(self, texts: Sequence[str]) -> bool:
        """Write these text frames at once, in one socket write, exactly as uvicorn's `send`
        would one by one. Only while the connection is open and its socket takes data without
        waiting (uvicorn's flow control); otherwise False, having written nothing."""
        proto = self._protocol
        if (
            not proto.handshake_complete
            or proto.close_sent
            or proto.disconnected
            or not proto.writable.is_set()
            or proto.transport.is_closing()
            or proto.conn.state is not State.OPEN
        ):
            return False
        conn = proto.conn
        for text in texts:
            conn.send_text(text.encode())
        proto.transport.write(b"".join(conn.data_to_send()))
        return True

    def abort(self) -> None:
        """Drop the connection with a TCP reset. A plain close would leave the kernel sending
        what is still queued (up to the socket's send buffer, several MB) to a peer that does not
        read, holding that memory for minutes in FIN-WAIT-1 after the gateway let go of it."""
        transport = self._protocol.transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    @property
    def closing(self) -> bool:
        """Whether the server side has started closing (the door, a close frame, a lost peer)."""
        proto = self._protocol
        return proto.close_sent or proto.disconnected or proto.transport.is_closing()

    def authenticated(self) -> None:
        """The connection has authenticated (`hello-ok` is on its way): lift the door's byte
        budget and deadline. Does nothing when the server runs without a door."""
        if isinstance(self._protocol, DoorWebSocketProtocol):
            self._protocol.authenticated()


def known_version(version: str) -> bool:
    """Whether `version` (uvicorn's `__version__`) is the minor version this module knows."""
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1])) == KNOWN_UVICORN
    except (IndexError, ValueError):
        return False


def recognise(send: object, *, version: str = uvicorn.__version__) -> ServerSocket | None:
    """The `ServerSocket` behind an ASGI `send`, or None when it is not uvicorn's sans-I/O
    WebSocket protocol of the known version (the reason is logged once per kind)."""
    owner = getattr(send, "__self__", None)
    if not isinstance(owner, WebSocketsSansIOProtocol):
        _report_once("send is not uvicorn's websockets-sansio protocol")
        return None
    if not known_version(version):
        _report_once(f"uvicorn {version} is not the known {KNOWN_UVICORN[0]}.{KNOWN_UVICORN[1]}")
        return None
    if not isinstance(owner.transport, asyncio.Transport):
        return None
    return ServerSocket(owner)


def server_socket(scope: Mapping[str, Any]) -> ServerSocket | None:
    """The connection's `ServerSocket`, when `ExposeServerSocket` recognised the server."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, ServerSocket) else None


def _report_once(reason: str) -> None:
    if reason not in _reported:
        _reported.add(reason)
        log.info("server internals not recognised; writing through plain ASGI send", reason=reason)


class ExposeServerSocket:
    """ASGI middleware: puts the connection's `ServerSocket` into each WebSocket scope (key
    `SCOPE_KEY`) when `recognise` knows the server behind `send`. Must wrap the application
    directly, with no middleware between the server and it that replaces `send`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            found = recognise(send)
            if found is not None:
                scope[SCOPE_KEY] = found
        await self.app(scope, receive, send)


# --- the front door ---------------------------------------------------------------------------


def door_protocols(door: Door) -> tuple[type[DoorHTTPProtocol], type[DoorWebSocketProtocol]]:
    """uvicorn's HTTP/1.1 (h11) and sans-I/O WebSocket protocol classes with `door` at accept;
    pass them as `uvicorn.Config(http=..., ws=...)`."""
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


class DoorHTTPProtocol(H11Protocol):
    """HTTP/1.1 with the door: a pass at accept, released when a request head has arrived or
    handed to the WebSocket protocol on upgrade; the head deadline re-armed after each response."""

    door: ClassVar[Door]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admission = _Admission(self.loop, self._give_up)
        self._upgraded = False
        self._served: object = None

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
        self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self._head_arrived() or self._upgraded or self.transport.is_closing():
            return
        self.admission.arm(self.door.settings.handshake_timeout_s)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._upgraded = True
        self.admission.disarm()
        if self.admission.door_pass is None:
            # An upgrade after plain requests on a kept-alive connection: a pass of its own.
            self.admission.door_pass = self.door.admit(self.client[0] if self.client else "?")
            if self.admission.door_pass is None:
                self._give_up()
                return
        super().handle_websocket_upgrade(event)

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
    1009 unparsed, the deadline with 1008 "handshake timeout"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admission = _Admission(self.loop, lambda: self._refuse(*HANDSHAKE_TIMEOUT))
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # uvicorn's HTTP protocol calls this before it hands the transport over, so the
        # transport still names it.
        previous = transport.get_protocol() if isinstance(transport, asyncio.Transport) else None
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
