"""The asyncio shell around `DiscordGatewayProtocol`: it opens connections, moves frames and
runs the timers the protocol asks for. All decisions are the protocol's.

Events go to `on_event` in the order they arrived, awaited one by one; a slow handler delays the
next frame (the binding's handler only puts events on its bounded queue, so this is the
backpressure point, not a place where events are dropped).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from bindings.discord.gateway import RESUMABLE_CLOSE, DiscordGatewayProtocol, GatewayEvent
from bindings.errors import GatewayProtocolError, StateTransitionError
from bindings.ws import ConnectFailed, ConnectionClosedInfo, Connector, WebSocketLike

log = structlog.get_logger("bindings.discord.shell")


class GatewayShell:
    def __init__(
        self,
        protocol: DiscordGatewayProtocol,
        *,
        discover: Callable[[], Awaitable[str]],
        on_event: Callable[[GatewayEvent], Awaitable[None]],
        connect: Connector,
        on_frame: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._proto = protocol
        self._discover = discover
        self._on_event = on_event
        self._connect = connect
        self._on_frame = on_frame
        self._clock = clock
        self._sleep = sleep
        self.connections = 0

    async def run(self) -> None:
        """Connect and stay connected until the protocol stops. Raises `FatalCloseError` when
        Discord closed for good, and whatever `discover` raises."""
        self._proto.start(await self._discover())
        while (plan := self._proto.next_connection()) is not None:
            if plan.delay_s > 0:
                await self._sleep(plan.delay_s)
            try:
                async with self._connect(plan.url) as ws:
                    self.connections += 1
                    await self._pump(ws)
            except ConnectFailed as exc:
                log.warning("gateway connection failed", error=str(exc))
                self._proto.connect_failed()
        if self._proto.fatal is not None:
            raise self._proto.fatal

    async def _pump(self, ws: WebSocketLike) -> None:
        proto = self._proto
        proto.connection_made(self._clock())
        code: int | None = None
        reason = ""
        try:
            while True:
                for frame in proto.data_to_send():
                    await ws.send(frame)
                request = proto.close_requested()
                if request is not None:
                    log.info("closing gateway connection", code=request.code, reason=request.reason)
                    await ws.close(request.code, request.reason)
                    code, reason = request.code, request.reason
                    break
                deadline = proto.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - self._clock())
                try:
                    frame_in = await asyncio.wait_for(ws.recv(), timeout)
                except TimeoutError:
                    proto.tick(self._clock())
                    continue
                self._on_frame()
                events = proto.receive(frame_in, self._clock())
                proto.tick(self._clock())
                for frame in proto.data_to_send():
                    await ws.send(frame)
                for event in events:
                    await self._on_event(event)
        except ConnectionClosedInfo as exc:
            code, reason = exc.code, exc.reason
            log.info("gateway connection closed", code=code, reason=reason)
        except (GatewayProtocolError, StateTransitionError) as exc:
            # A frame Discord would never send: drop this connection and resume on a new one.
            log.error("gateway protocol violation", error=str(exc))
            code, reason = RESUMABLE_CLOSE, "protocol error"
            try:
                await ws.close(code, reason)
            except ConnectionClosedInfo:
                pass
        proto.connection_lost(code, reason)
