"""uvicorn's protocols as the gateway runs them (`gateway.door_protocols`), against a small ASGI
application: the limit on an incomplete request head on every request of a connection, one `Host`
header per request, the handshake response written together with the first frame (and not held
when no frame follows), and the door's pass handed over and given back under both event loops.
The door's other properties are checked against the real daemon in tests/e2e/test_front_door.py
and tests/e2e/test_handshake.py."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from gateway.door import Door, DoorSettings
from gateway.door_protocols import MAX_HEAD_BYTES, DoorWebSocketProtocol, door_protocols
from gateway.uvicorn_socket import ExposeServerSocket, server_socket

UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
FIRST = b"\x81\x05first"
"""The frame `first` as the server writes it (text, unmasked)."""


class App:
    """Answers HTTP requests `ok`; accepts WebSockets, lifts the door for them when the server
    is recognised, and sends `first` from another task `delay` seconds after the accept (as the
    gateway's writer task sends the challenge)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.recognised: list[bool] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        found = server_socket(scope)
        self.recognised.append(found is not None)
        if found is not None:
            found.authenticated()
        first = asyncio.create_task(self._first(send))
        while (await receive())["type"] != "websocket.disconnect":
            pass
        first.cancel()
        with contextlib.suppress(BaseException):
            await first

    async def _first(self, send: Send) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        await send({"type": "websocket.send", "text": "first"})


@contextlib.asynccontextmanager
async def served(door: Door, app: App) -> AsyncIterator[int]:
    """`app` under a real uvicorn with the door's protocols; yields the port."""
    http, ws = door_protocols(door)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        ExposeServerSocket(app), http=http, ws=ws, lifespan="off", log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), "the server did not start"
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def _response(reader: asyncio.StreamReader) -> bytes:
    """One response: its head, and its body when it has a length (else up to the close)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return head + await reader.readexactly(int(line.split(b":")[1]))
    return head + await asyncio.wait_for(reader.read(), 5)


def _get(header_bytes: int) -> bytes:
    return b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"p" * header_bytes + b"\r\n\r\n"


async def test_every_request_head_of_a_connection_is_capped() -> None:
    door = Door(DoorSettings())
    async with served(door, App()) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_get(MAX_HEAD_BYTES // 2))
        assert (await _response(reader)).startswith(b"HTTP/1.1 200")
        # Kept alive, past the door's byte budget (the first head arrived): still capped.
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        with contextlib.suppress(ConnectionError):  # refused once past the limit
            for index in range(5):  # header after header, and the head never ends
                writer.write(b"X-Pad-%d: " % index + b"p" * (MAX_HEAD_BYTES // 4) + b"\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)
        refused = await _response(reader)
        assert refused.startswith(b"HTTP/1.1 400"), refused[:40]
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
        writer.close()

        # The first head too, when it is still incomplete past the limit (within the budget).
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_get(MAX_HEAD_BYTES + 1)[:-4])
        assert (await _response(reader)).startswith(b"HTTP/1.1 400")
        writer.close()
    assert door.pending() == 0


async def test_a_request_with_two_host_headers_is_refused() -> None:
    async with served(Door(DoorSettings()), App()) as port:
        for request, status in (
            (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"200"),
            (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", b"400"),
            (UPGRADE.replace(b"\r\n\r\n", b"\r\nHost: evil.example\r\n\r\n"), b"400"),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            assert (await _response(reader)).startswith(b"HTTP/1.1 " + status), request
            writer.close()


class RecordingTransport(asyncio.Transport):
    """A connected transport that records each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_protocol(self) -> Any:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _upgraded(app: App, until: Callable[[list[bytes]], bool]) -> list[bytes]:
    """Upgrade a connection to `app` over a recording transport; the writes once `until` holds
    for them (at most 20 turns of the loop later), the connection then closed."""
    config = uvicorn.Config(app, ws=DoorWebSocketProtocol, lifespan="off", log_config=None)
    protocol = DoorWebSocketProtocol(config=config, server_state=ServerState(), app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(UPGRADE)
    for _ in range(20):
        if until(transport.writes):
            break
        await asyncio.sleep(0)
    writes = list(transport.writes)
    protocol.connection_lost(None)
    for _ in range(5):
        await asyncio.sleep(0)
    return writes


async def test_the_handshake_response_and_the_first_frame_go_out_in_one_write() -> None:
    writes = await _upgraded(App(), lambda writes: any(w.endswith(FIRST) for w in writes))
    assert len(writes) == 1, writes
    assert writes[0].startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert writes[0].endswith(b"\r\n\r\n" + FIRST)


async def test_the_handshake_response_is_not_held_for_a_frame_that_comes_later() -> None:
    writes = await _upgraded(App(delay=1.0), bool)
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 101"), writes
    assert writes[0].endswith(b"\r\n\r\n")  # the response alone, within a few turns


async def _authenticated_websocket() -> tuple[Door, App, bytes]:
    """Upgrade one connection and read the 101 with `first`; the door as it is while the
    connection is still open."""
    door = Door(DoorSettings())
    app = App()
    async with served(door, app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(UPGRADE)
        received = b""
        while not received.endswith(FIRST):
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            assert chunk, received
            received += chunk
        pending = door.pending()
        writer.close()
    assert pending == 0, "an authenticated connection still holds its pass"
    return door, app, received


def test_the_pass_is_handed_over_and_given_back() -> None:
    door, app, received = asyncio.run(_authenticated_websocket())
    assert app.recognised == [True]
    assert received.startswith(b"HTTP/1.1 101") and door.admitted == 1 and door.pending() == 0
