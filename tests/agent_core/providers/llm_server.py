"""A scripted HTTP/1.1 server on 127.0.0.1 that answers like an LLM API.

Each request takes the next scripted `Reply`: a status with a JSON body and headers (Retry-After,
...), or a streamed body sent in chunks with pauses that then ends normally, stalls until the
client goes away, closes without finishing the body, or resets the connection. Requests are
recorded (method, path, headers, JSON body) so tests can check what a provider sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Literal

Ending = Literal["end", "stall", "close", "reset"]


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: list[bytes] | None = None
    """When set, the body is sent chunked, one piece per chunk."""
    delay: float = 0.0
    """Seconds to wait before each chunk."""
    header_delay: float = 0.0
    """Seconds to wait before the status line (a server slow to answer)."""
    ending: Ending = "end"


def sse(
    *pieces: str | bytes, delay: float = 0.0, ending: Ending = "end", headers: dict[str, str] | None = None
) -> Reply:
    """A 200 event-stream reply sent as the given pieces."""
    chunks = [p.encode() if isinstance(p, str) else p for p in pieces]
    return Reply(
        headers={"content-type": "text/event-stream", **(headers or {})},
        chunks=chunks,
        delay=delay,
        ending=ending,
    )


def status(code: int, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
    """A complete (non-streamed) reply; dicts and lists are sent as JSON."""
    raw = (
        body
        if isinstance(body, bytes)
        else (json.dumps(body) if not isinstance(body, str) else body).encode()
    )
    if body is None:
        raw = b""
    return Reply(status=code, headers={"content-type": "application/json", **(headers or {})}, body=raw)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class LLMServer:
    """Serve scripted replies; `base_url` is ``http://127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[RecordedRequest] = []
        self.request_times: list[float] = []
        self.disconnects = 0
        self.disconnected = asyncio.Event()
        """Set when a client goes away from a stalled response (`disconnects` counts them)."""
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.requests.append(RecordedRequest(method, path, headers, body))
        self.request_times.append(asyncio.get_running_loop().time())
        reply = (
            self.replies.pop(0)
            if self.replies
            else status(418, {"error": {"message": "no scripted reply left"}})
        )
        return await self._respond(reply, reader, writer)

    async def _respond(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if reply.header_delay:
            await asyncio.sleep(reply.header_delay)
        head = [f"HTTP/1.1 {reply.status} Scripted"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.chunks is None:
            head.append(f"content-length: {len(reply.body)}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + reply.body)
            await writer.drain()
            return True
        head.append("transfer-encoding: chunked")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await writer.drain()
        for chunk in reply.chunks:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
        if reply.ending == "end":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if reply.ending == "stall":
            # Hold the response open until the client goes away.
            while await reader.read(1024):
                pass
            self.disconnects += 1
            self.disconnected.set()
            return False
        if reply.ending == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        return False
