"""`MetricsListener`: the metrics on a port of their own, on the loopback address, for a
Prometheus that scrapes this machine without the gateway's token.

A deliberately small HTTP/1.1 server: it reads one request head (at most 8 KiB, within 5 s),
answers `GET /metrics` with the exposition and anything else with 404 (405 for another method),
and closes the connection. The server and its connections belong to the listener; `aclose()` ends
them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("gateway.telemetry")

HEAD_LIMIT = 8 * 1024
HEAD_TIMEOUT_S = 5.0
LOOPBACK = "127.0.0.1"

Scrape = Callable[[], Awaitable[tuple[bytes, str]]]
"""The exposition and its content type."""


def parse_request_line(head: bytes) -> tuple[str, str] | None:
    """`(method, path)` of a request head, or None when it is not HTTP."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    return parts[0], parts[1].split("?", 1)[0]


def response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class MetricsListener:
    """Serves `GET /metrics` on `127.0.0.1:port` until `aclose()`."""

    def __init__(self, scrape: Scrape) -> None:
        self._scrape = scrape
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int | None:
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, port: int) -> None:
        """Listen. Raises OSError saying which port when it cannot (taken, not allowed)."""
        try:
            self._server = await asyncio.start_server(self._serve, LOOPBACK, port, limit=HEAD_LIMIT)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise OSError(
                exc.errno, f"[metrics] port {port}: cannot listen on {LOOPBACK} ({reason})"
            ) from exc

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            writer.write(await self._answer(head))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except Exception:
            log.exception("serving metrics failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._connections.discard(task)

    async def _answer(self, head: bytes) -> bytes:
        request = parse_request_line(head)
        if request is None:
            return response("400 Bad Request", b"bad request\n")
        method, path = request
        if path != "/metrics":
            return response("404 Not Found", b"not found\n")
        if method != "GET":
            return response("405 Method Not Allowed", b"method not allowed\n")
        body, content_type = await self._scrape()
        return response("200 OK", body, content_type)

    async def aclose(self) -> None:
        """Stop listening and end open connections. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._connections):
            task.cancel()
        with contextlib.suppress(Exception):
            await server.wait_closed()
