"""Run a stand-in's ASGI app (uvicorn) or WebSocket handler on a real loopback port, for as long
as a test needs it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from websockets.asyncio.server import ServerConnection, serve


@asynccontextmanager
async def serve_http(app: ASGIApp) -> AsyncIterator[int]:
    """Serve `app` on 127.0.0.1 at a free port; yields the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        yield port
    finally:
        server.should_exit = True
        await task
        sock.close()


class StandInServers:
    """Base of a stand-in: the servers it starts (`_serve_http`, `_serve_ws`, `_enter`) all stop
    at `__aexit__`."""

    def __init__(self) -> None:
        self._stack = AsyncExitStack()

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _serve_http(self, app: ASGIApp) -> int:
        """Serve `app` over HTTP; returns the port."""
        return await self._stack.enter_async_context(serve_http(app))

    async def _serve_ws(self, handler: Callable[[ServerConnection], Awaitable[None]], **options: Any) -> int:
        """Serve WebSocket connections with `handler` (`options` go to `serve`); returns the port."""
        server = await self._stack.enter_async_context(serve(handler, "127.0.0.1", 0, **options))
        return int(next(iter(server.sockets)).getsockname()[1])
