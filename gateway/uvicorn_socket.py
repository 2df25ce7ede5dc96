"""Direct access to uvicorn's WebSocket protocol object (uvicorn is pinned in pyproject.toml to
the minor version this code was written against, `KNOWN_UVICORN`).

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

The front door's protocol classes, which subclass uvicorn's too, are in `gateway.door_protocols`.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from gateway.door_protocols import DoorWebSocketProtocol

log = structlog.get_logger("gateway.uvicorn_socket")

KNOWN_UVICORN = (0, 54)
"""The uvicorn minor version whose `WebSocketsSansIOProtocol` this module reads."""

SCOPE_KEY = "gateway.server_socket"
"""Scope key of the connection's `ServerSocket` (absent when the server is not recognised)."""


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
    if owner.transport is None:  # not connected (uvloop's transports are no asyncio.Transport)
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
