"""The WebSocket seam of the socket shells: a connector opens a connection to a URL.

The default connector is `websockets`' asyncio client. Its errors are translated here:
opening fails with `OSError` subclasses or `ConnectFailed`, a closed connection surfaces as
`ConnectionClosedInfo` from `recv`/`send`, so the shells never see a `websockets` exception.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import websockets
from websockets.asyncio.client import ClientConnection, connect

from bindings.errors import BindingError


class ConnectFailed(BindingError):
    """The connection could not be opened (refused, handshake rejected, timed out)."""


class ConnectionClosedInfo(BindingError):
    """The connection closed; `code` is the close code received (None: no close frame)."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"connection closed ({code}): {reason}")
        self.code = code
        self.reason = reason


class WebSocketLike(Protocol):
    async def recv(self) -> str | bytes: ...

    async def send(self, message: str) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


Connector = Callable[[str], AbstractAsyncContextManager[WebSocketLike]]


@dataclass(frozen=True, kw_only=True)
class SocketSettings:
    open_timeout_s: float = 10.0
    close_timeout_s: float = 5.0
    ping_interval_s: float | None = None
    """WebSocket-level pings. Discord has its own heartbeat; Slack wants pings (about 10 s)."""
    ping_timeout_s: float | None = None
    max_size: int = 16 * 1024 * 1024


class _Connection:
    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn

    async def recv(self) -> str | bytes:
        try:
            return await self._conn.recv()
        except websockets.ConnectionClosed as exc:
            raise ConnectionClosedInfo(
                exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else ""
            ) from exc

    async def send(self, message: str) -> None:
        try:
            await self._conn.send(message)
        except websockets.ConnectionClosed as exc:
            raise ConnectionClosedInfo(
                exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else ""
            ) from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._conn.close(code, reason)


def websockets_connector(settings: SocketSettings | None = None) -> Connector:
    """A connector over `websockets.asyncio.client.connect`."""
    cfg = settings or SocketSettings()

    @asynccontextmanager
    async def open_connection(url: str) -> AsyncIterator[WebSocketLike]:
        try:
            conn = await connect(
                url,
                open_timeout=cfg.open_timeout_s,
                close_timeout=cfg.close_timeout_s,
                ping_interval=cfg.ping_interval_s,
                ping_timeout=cfg.ping_timeout_s,
                max_size=cfg.max_size,
            )
        except (OSError, TimeoutError, websockets.InvalidHandshake, websockets.InvalidURI) as exc:
            raise ConnectFailed(f"could not connect to {url}: {exc}") from exc
        try:
            yield _Connection(conn)
        finally:
            await conn.close()

    return open_connection
