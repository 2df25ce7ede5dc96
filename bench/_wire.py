"""A minimal WebSocket client for benchmarks, cheap enough that the client is not what is measured.

`WireClient` speaks just enough RFC 6455 over an `asyncio.Protocol`: the HTTP upgrade, unmasked
server frames (text, continuation, ping, close) and masked client frames. Received messages stay
`bytes` (no UTF-8 decode, no JSON parse unless the caller asks): counting a frame costs a header
parse and a slice, a few microseconds, where `websockets`' asyncio client spends tens.

Two ways to read what arrives:

- `recv()` pops the next event message (the default, for handshakes);
- `on_event = callback` hands every event message to `callback(payload, received_at)` as soon as
  it is parsed, with `received_at` taken once per TCP read (`time.monotonic()`, which on Linux
  is one clock for every process, so several client processes can be compared).

Responses (`{"type":"res",...}`) always go to the `request()` that is waiting for their id.
Loopback only; no TLS, no extensions, no compression.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import platform
import time
from collections import deque
from collections.abc import Callable
from typing import Any

_RES_PREFIX = b'{"type":"res"'
_EVENT_PREFIX = b'{"type":"event"'
_OP_CONT, _OP_TEXT, _OP_BINARY, _OP_CLOSE, _OP_PING, _OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

EventCallback = Callable[[bytes, float], None]


class WireError(Exception):
    """The connection failed, closed, or the gateway answered a request with an error."""


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """One masked client frame."""
    length = len(payload)
    if length < 126:
        header = bytes((0x80 | opcode, 0x80 | length))
    elif length < 1 << 16:
        header = bytes((0x80 | opcode, 0x80 | 126)) + length.to_bytes(2, "big")
    else:
        header = bytes((0x80 | opcode, 0x80 | 127)) + length.to_bytes(8, "big")
    mask = os.urandom(4)
    if not length:
        return header + mask
    key = (mask * (length // 4 + 1))[:length]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(length, "big")
    return header + mask + masked


class WireClient(asyncio.Protocol):
    """One connection. Create with `await WireClient.open(host, port)`; close with `close()`."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.transport: asyncio.Transport | None = None
        self.on_event: EventCallback | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.received = 0
        self._key = base64.b64encode(os.urandom(16)).decode()
        self._upgraded = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()
        self._fragments: list[bytes] = []
        self._inbox: deque[bytes] = deque()
        self._inbox_ready: asyncio.Future[None] | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = 0

    @classmethod
    async def open(cls, host: str, port: int, *, timeout: float = 10.0) -> WireClient:
        """Connect and upgrade. Raises OSError when nothing listens, WireError on a bad upgrade."""
        loop = asyncio.get_running_loop()
        _, client = await asyncio.wait_for(
            loop.create_connection(lambda: cls(host, port), host, port), timeout
        )
        try:
            await asyncio.wait_for(asyncio.shield(client._upgraded), timeout)
        except BaseException:
            client.close()
            raise
        return client

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(
            (
                f"GET / HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {self._key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )

    def connection_lost(self, exc: Exception | None) -> None:
        error = WireError(f"connection lost: {exc}" if exc else "connection closed")
        if not self._upgraded.done():
            self._upgraded.set_exception(error)
            self._upgraded.exception()  # mark retrieved: open() may already have given up
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        self._wake()
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._upgraded.done():
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self._buffer[: self._buffer.find(b"\r\n")])
            del self._buffer[: end + 4]
            if b" 101 " not in status:
                self._upgraded.set_exception(WireError(f"upgrade refused: {status.decode(errors='replace')}"))
                self.close()
                return
            self._upgraded.set_result(None)
        self._parse(time.monotonic())

    # --- frames ----------------------------------------------------------------------------------

    def _parse(self, now: float) -> None:
        buf = self._buffer
        size = len(buf)
        pos = 0
        on_event = self.on_event
        while size - pos >= 2:
            first, second = buf[pos], buf[pos + 1]
            length = second & 0x7F
            head = 2
            if length == 126:
                if size - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                head = 4
            elif length == 127:
                if size - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                head = 10
            if second & 0x80:
                raise WireError("the server sent a masked frame")
            end = pos + head + length
            if end > size:
                break
            payload = bytes(buf[pos + head : end])
            pos = end
            # Hot path: a whole text frame that is an event, while counting.
            if (
                first == 0x81
                and on_event is not None
                and not self._fragments
                and payload.startswith(_EVENT_PREFIX)
            ):
                self.received += 1
                on_event(payload, now)
                continue
            self._frame(first & 0x0F, bool(first & 0x80), payload, now)
        if pos:
            del buf[:pos]

    def _frame(self, opcode: int, fin: bool, payload: bytes, now: float) -> None:
        if opcode in (_OP_TEXT, _OP_BINARY, _OP_CONT):
            if not fin:
                self._fragments.append(payload)
                return
            if self._fragments:
                self._fragments.append(payload)
                payload = b"".join(self._fragments)
                self._fragments.clear()
            self._message(payload, now)
        elif opcode == _OP_PING:
            self._write(_OP_PONG, payload)
        elif opcode == _OP_CLOSE:
            self._write(_OP_CLOSE, payload[:2])
            if self.transport is not None:
                self.transport.close()

    def _message(self, payload: bytes, now: float) -> None:
        if payload.startswith(_RES_PREFIX):
            response = json.loads(payload)
            future = self._pending.pop(str(response.get("id")), None)
            if future is not None and not future.done():
                future.set_result(response)
            return
        self.received += 1
        if self.on_event is not None:
            self.on_event(payload, now)
            return
        self._inbox.append(payload)
        self._wake()

    def _wake(self) -> None:
        if self._inbox_ready is not None and not self._inbox_ready.done():
            self._inbox_ready.set_result(None)

    def _write(self, opcode: int, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_client_frame(opcode, payload))

    # --- API -------------------------------------------------------------------------------------

    def send_text(self, text: str) -> None:
        self._write(_OP_TEXT, text.encode())

    async def recv(self, timeout: float = 10.0) -> bytes:
        """The next event message (when no `on_event` callback is set). Raises WireError when the
        connection closes first, TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while not self._inbox:
            if self.closed.done():
                raise WireError("connection closed")
            self._inbox_ready = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(self._inbox_ready, max(0.0, deadline - time.monotonic()))
        return self._inbox.popleft()

    async def request(self, method: str, params: Any = None, *, timeout: float = 60.0) -> Any:
        """Send a request; return its payload. Raises WireError for `ok:false` or a closed socket."""
        self._ids += 1
        rid = f"b{self._ids}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        frame: dict[str, Any] = {"type": "req", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        self.send_text(json.dumps(frame, separators=(",", ":")))
        try:
            response = await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(rid, None)
        if not response.get("ok"):
            raise WireError(f"{method}: {response.get('error')}")
        return response.get("payload")

    async def gateway_connect(
        self, token: str, *, caps: tuple[str, ...] = ("session-scoped-events", "native-events-only")
    ) -> Any:
        """The gateway handshake: wait for `connect.challenge`, send `connect`, return hello-ok."""
        challenge = json.loads(await self.recv())
        if challenge.get("event") != "connect.challenge":
            raise WireError(f"expected connect.challenge, got {challenge.get('event')!r}")
        params = {
            "minProtocol": 4,
            "maxProtocol": 4,
            "client": {"id": "bench", "version": "0", "platform": platform.system().lower(), "mode": "cli"},
            "role": "operator",
            "scopes": ["operator.read", "operator.write"],
            "caps": list(caps),
            "auth": {"token": token},
        }
        return await self.request("connect", params)

    def close(self) -> None:
        """Close the socket (no closing handshake: benchmarks end many connections at once)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


async def open_many(host: str, port: int, count: int, *, concurrency: int = 64) -> list[WireClient]:
    """`count` connections, opened at most `concurrency` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> WireClient:
        async with gate:
            return await WireClient.open(host, port)

    return list(await asyncio.gather(*(one() for _ in range(count))))
