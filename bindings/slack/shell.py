"""The asyncio shell around `SocketModeProtocol`: fetch a fresh URL, connect, move frames, deliver
events, send the acknowledgements the binding asks for (`ack`), reconnect with backoff when
connections fail.

Failed attempts (the URL could not be fetched, the socket could not open, or it closed before
`hello`) back off exponentially from `backoff_initial_s` to `backoff_max_s`; a connection that
reached `hello` reconnects at once when it ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from bindings.errors import GatewayProtocolError, PlatformUnavailableError, StateTransitionError
from bindings.slack.socket_mode import SocketEvent, SocketModeProtocol
from bindings.state import ConnectionState
from bindings.ws import ConnectFailed, ConnectionClosedInfo, Connector, WebSocketLike

log = structlog.get_logger("bindings.slack.shell")


class SocketModeShell:
    def __init__(
        self,
        protocol: SocketModeProtocol,
        *,
        open_url: Callable[[], Awaitable[str]],
        on_event: Callable[[SocketEvent], Awaitable[None]],
        connect: Connector,
        on_frame: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
    ) -> None:
        self._proto = protocol
        self._open_url = open_url
        self._on_event = on_event
        self._connect = connect
        self._on_frame = on_frame
        self._clock = clock
        self._sleep = sleep
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self.connections = 0
        self._ws: WebSocketLike | None = None

    async def ack(self, envelope_id: str) -> bool:
        """Acknowledge an envelope on the connection that delivered it. False when that
        connection has ended (Slack delivers the event again) or it was acknowledged already."""
        ws = self._ws
        if ws is None or not self._proto.ack(envelope_id):
            return False
        try:
            await self._send_pending(ws)
        except ConnectionClosedInfo:
            return False
        return True

    async def _send_pending(self, ws: WebSocketLike) -> None:
        for out in self._proto.data_to_send():
            await ws.send(out)

    async def run(self) -> None:
        """Stay connected until Slack disables the link. Raises `PlatformRequestError` when
        `apps.connections.open` is refused (bad or wrong token)."""
        self._proto.start()
        failures = 0
        while self._proto.state is not ConnectionState.CLOSED:
            if failures:
                delay = min(self._backoff_initial_s * 2 ** (failures - 1), self._backoff_max_s)
                await self._sleep(delay)
            try:
                url = await self._open_url()
            except PlatformUnavailableError as exc:
                log.warning("apps.connections.open failed", error=str(exc))
                failures += 1
                continue
            try:
                async with self._connect(url) as ws:
                    self.connections += 1
                    await self._pump(ws)
            except ConnectFailed as exc:
                log.warning("socket mode connection failed", error=str(exc))
                failures += 1
                continue
            failures = 0 if self._proto.got_hello else failures + 1

    async def _pump(self, ws: WebSocketLike) -> None:
        proto = self._proto
        proto.connection_made(self._clock())
        self._ws = ws
        try:
            while True:
                request = proto.close_requested()
                if request is not None:
                    await ws.close(request.code, request.reason)
                    break
                deadline = proto.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - self._clock())
                try:
                    frame = await asyncio.wait_for(ws.recv(), timeout)
                except TimeoutError:
                    proto.tick(self._clock())
                    continue
                self._on_frame()
                events = proto.receive(frame, self._clock())
                await self._send_pending(ws)
                for event in events:
                    await self._on_event(event)
        except ConnectionClosedInfo as exc:
            log.info("socket mode connection closed", code=exc.code, reason=exc.reason)
        except (GatewayProtocolError, StateTransitionError) as exc:
            log.error("socket mode protocol violation", error=str(exc))
            try:
                await ws.close(1002, "protocol error")
            except ConnectionClosedInfo:
                pass
        finally:
            self._ws = None
        proto.connection_lost()
