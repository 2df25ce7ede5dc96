"""One WebSocket connection: challenge, handshake, then requests until it closes.

The socket is read by this coroutine only; everything sent goes through the connection's hub
outlet (one writer, a bounded buffer). Requests are handled concurrently (responses may come out
of order), bounded by `max_inflight` per connection, and rate-limited per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
import uuid
from typing import TYPE_CHECKING, Any

import structlog
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.protocol import State

from gateway.hub import Outlet, encode_event
from gateway.methods import HANDLERS
from gateway.methods.base import Call, ConnState, MethodError
from gateway.protocol import frames, handshake
from gateway.protocol.codes import CloseCode
from gateway.protocol.methods import expand_scopes, missing_scope_error, scope_allows, validate_params

if TYPE_CHECKING:
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.connection")


CLOSE_TIMEOUT_S = 3.0
"""How long a close frame may wait behind a client that does not read before the socket is
dropped without it."""

SOCKET_TRANSPORT = "gateway.transport"
SOCKET_PROTOCOL = "gateway.protocol"
_OPEN = State.OPEN
"""Scope key of the server's protocol object for the connection (uvicorn's sans-I/O WebSocket
protocol), when present: frames are then written to it directly, several per socket write."""
"""Scope key under which the app keeps the server's asyncio transport of a WebSocket (see
`gateway.app`), so that a connection stuck behind a client that does not read can be aborted."""


class _Transport:
    """The hub's view of one WebSocket: send text, close (bounded in time)."""

    def __init__(self, ws: WebSocket, *, close_timeout: float = CLOSE_TIMEOUT_S) -> None:
        self.ws = ws
        self.close_timeout = close_timeout
        raw = ws.scope.get(SOCKET_TRANSPORT)
        self._raw: asyncio.WriteTransport | None = raw if isinstance(raw, asyncio.WriteTransport) else None
        self._closed = False
        self._proto: Any = ws.scope.get(SOCKET_PROTOCOL)

    async def send_text(self, data: str) -> None:
        await self.ws.send_text(data)

    def write_now(self, texts: list[str]) -> bool:
        """The fan-out fast path: encode the frames with the server's own WebSocket protocol
        object and write them to the socket in one call, as the server's `send` would one by
        one. Only while the socket takes data without waiting (the server's flow control) and
        the connection is open; otherwise False and the regular `send_text` path is used."""
        proto = self._proto
        if (
            proto is None
            or self._closed
            or not proto.handshake_complete
            or proto.close_sent
            or proto.disconnected
            or not proto.writable.is_set()
            or proto.transport.is_closing()
            or proto.conn.state is not _OPEN
        ):
            return False
        conn = proto.conn
        for text in texts:
            conn.send_text(text.encode())
        proto.transport.write(b"".join(conn.data_to_send()))
        return True

    async def close(self, code: int, reason: str) -> None:
        """Close with `code`; when the close frame cannot be written within `close_timeout`
        (uvicorn waits for the client to drain the socket first), abort the socket."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self.ws.close(code, reason), timeout=self.close_timeout)
        except TimeoutError:
            log.warning("dropping a connection that does not read", code=code, reason=reason)
            self.abort()
        except Exception:
            self.abort()

    def abort(self) -> None:
        """Drop the connection with a TCP reset. A plain close would leave the kernel sending
        what is still queued (up to the socket's send buffer, several MB) to a peer that does
        not read, holding that memory for minutes in FIN-WAIT-1 after we let go of the socket."""
        if self._raw is None:
            return
        sock = self._raw.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._raw.abort()


class RateLimiter:
    """Token bucket: `rate` requests per second with bursts of `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = time.monotonic()

    def take(self) -> float:
        """0 when allowed, otherwise seconds until a token is available."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


async def serve_connection(ws: WebSocket, state: GatewayState) -> None:
    cfg = state.limits
    origin = ws.headers.get("origin")
    host = ws.headers.get("host", "")
    if not state.origin_allowed(origin, host):
        await ws.close(CloseCode.POLICY_VIOLATION, "origin not allowed")
        log.warning("refused a browser connection from another origin", origin=origin)
        return
    await ws.accept()
    conn_id = str(uuid.uuid4())
    transport = _Transport(ws)
    outlet = Outlet(conn_id=conn_id, transport=transport, max_buffered_bytes=cfg.max_buffered_bytes)

    async def close_outlet(code: int, reason: str) -> None:
        if code == CloseCode.POLICY_VIOLATION:
            state.hub.slow_consumers += 1
        await transport.close(code, reason)

    outlet.on_close = close_outlet
    outlet.start()
    remote = ws.client.host if ws.client else "?"
    conn: ConnState | None = None
    tasks: set[asyncio.Task[Any]] = set()
    try:
        nonce, _ts, challenge = handshake.make_challenge()
        outlet.send_raw(challenge)
        conn = await _handshake(ws, state, outlet, nonce, remote)
        if conn is None:
            return
        state.hub.register(outlet)
        state.on_connect(conn)
        await _request_loop(ws, state, conn, tasks)
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("connection failed", conn_id=conn_id)
        with contextlib.suppress(Exception):
            await transport.close(CloseCode.INTERNAL_ERROR, "internal error")
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        state.hub.remove(conn_id)
        if conn is not None:
            state.on_disconnect(conn)
        await outlet.aclose()


async def _receive(ws: WebSocket) -> str | bytes | None:
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    if message.get("text") is not None:
        return str(message["text"])
    if message.get("bytes") is not None:
        return bytes(message["bytes"])
    return None


async def _handshake(
    ws: WebSocket, state: GatewayState, outlet: Outlet, nonce: str, remote: str
) -> ConnState | None:
    limits = state.limits
    parser = state.parser
    deadline = time.monotonic() + limits.handshake_timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            await _close(outlet, CloseCode.POLICY_VIOLATION, "handshake timeout")
            return None
        try:
            raw = await asyncio.wait_for(_receive(ws), timeout=remaining)
        except TimeoutError:
            await _close(outlet, CloseCode.POLICY_VIOLATION, "handshake timeout")
            return None
        if raw is None:
            continue
        parsed = parser.parse(raw, authenticated=False)
        if isinstance(parsed, frames.ProtocolViolation):
            if parsed.response is not None:
                outlet.send_response(parsed.response)
            if parsed.close_code is not None:
                await _close(outlet, parsed.close_code, parsed.close_reason or "protocol error")
                return None
            continue
        if parsed.method != "connect":
            outlet.send_response(
                frames.response_error(
                    parsed.id, "INVALID_REQUEST", "invalid handshake: first request must be connect"
                )
            )
            await _close(outlet, CloseCode.POLICY_VIOLATION, "invalid handshake")
            return None
        if not state.ready:
            # Starting or stopping: as OpenClaw does, answer the connect and close 1013.
            refused = handshake.unavailable_rejection(
                "gateway stopping; retry shortly" if state.stopping else "gateway starting; retry shortly"
            )
            outlet.send_response(refused.response(parsed.id))
            await _close(outlet, refused.close_code, refused.close_reason)
            return None
        retry = state.auth_failures.blocked(remote)
        if retry:
            refused = handshake.rate_limited_rejection(retry)
            outlet.send_response(refused.response(parsed.id))
            await _close(outlet, refused.close_code, refused.close_reason)
            return None
        outcome = handshake.validate_connect(parsed.params or {}, nonce=nonce, auth=state.auth)
        if isinstance(outcome, handshake.ConnectRejected):
            if outcome.auth_failure:
                state.auth_failures.failed(remote)
            outlet.send_response(outcome.response(parsed.id))
            await _close(outlet, outcome.close_code, outcome.close_reason)
            return None
        state.auth_failures.succeeded(remote)
        scopes = expand_scopes(outcome.scopes)
        outlet.scopes = scopes
        outlet.caps = frozenset(outcome.caps)
        conn = ConnState(
            conn_id=outlet.conn_id,
            outlet=outlet,
            scopes=scopes,
            caps=frozenset(outcome.caps),
            client=dict(outcome.client),
            remote=remote,
        )
        outlet.send_response(frames.response_ok(parsed.id, state.hello_ok(conn, outcome)))
        return conn


async def _close(outlet: Outlet, code: int, reason: str) -> None:
    await outlet.drain()
    await outlet.transport.close(int(code), reason)


async def _request_loop(
    ws: WebSocket, state: GatewayState, conn: ConnState, tasks: set[asyncio.Task[Any]]
) -> None:
    limits = state.limits
    parser = state.parser
    limiter = RateLimiter(limits.requests_per_second, limits.request_burst)
    inflight = asyncio.Semaphore(limits.max_inflight)
    outlet = conn.outlet
    while not outlet.closed:
        raw = await _receive(ws)
        if raw is None:
            continue
        parsed = parser.parse(raw, authenticated=True)
        if isinstance(parsed, frames.ProtocolViolation):
            if parsed.response is not None:
                outlet.send_response(parsed.response)
            if parsed.close_code is not None:
                await _close(outlet, parsed.close_code, parsed.close_reason or "protocol error")
                return
            continue
        wait = limiter.take()
        if wait > 0:
            outlet.send_response(
                frames.response_error(
                    parsed.id,
                    "UNAVAILABLE",
                    "too many requests on this connection",
                    retryable=True,
                    retry_after_ms=int(wait * 1000) + 1,
                )
            )
            continue
        if inflight.locked():
            outlet.send_response(
                frames.response_error(
                    parsed.id,
                    "UNAVAILABLE",
                    "too many requests in flight on this connection",
                    retryable=True,
                    retry_after_ms=100,
                )
            )
            continue
        await inflight.acquire()
        task = asyncio.create_task(_dispatch(state, conn, parsed.id, parsed.method, parsed.params))
        tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            tasks.discard(t)
            inflight.release()

        task.add_done_callback(done)


async def _dispatch(state: GatewayState, conn: ConnState, req_id: str, method: str, params: Any) -> None:
    outlet = conn.outlet
    if method == "connect":
        outlet.send_response(frames.response_error(req_id, "INVALID_REQUEST", "already connected"))
        return
    entry = HANDLERS.get(method)
    if entry is None:
        outlet.send_response(frames.response_error(req_id, "INVALID_REQUEST", f"unknown method: {method}"))
        return
    handler, _scope = entry
    if not scope_allows(conn.scopes, method):
        shape = missing_scope_error(method)
        outlet.send_response(frames.response_error(req_id, shape.code, shape.message, details=shape.details))
        return
    checked = validate_params(method, params if params is not None else {})
    if not hasattr(checked, "model_dump"):
        shape = checked.to_error()
        outlet.send_response(frames.response_error(req_id, shape.code, shape.message, details=shape.details))
        return
    raw_params = dict(params) if isinstance(params, dict) else {}

    def respond_later(payload: Any | None, error: MethodError | None) -> None:
        if error is not None:
            outlet.send_response(_error_frame(req_id, error, payload=payload))
        else:
            outlet.send_response(frames.response_ok(req_id, payload))

    call = Call(
        state=state, conn=conn, id=req_id, method=method, params=raw_params, respond_later=respond_later
    )
    try:
        payload = await handler(call)
    except MethodError as exc:
        outlet.send_response(_error_frame(req_id, exc))
        return
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("method failed", method=method)
        outlet.send_response(
            frames.response_error(
                req_id,
                "UNAVAILABLE",
                f"internal error: {type(exc).__name__}",
                retryable=True,
                retry_after_ms=1000,
            )
        )
        return
    outlet.send_response(frames.response_ok(req_id, payload))
    if call.after_response is not None:
        call.after_response()


def _error_frame(req_id: str, exc: MethodError, *, payload: Any = None) -> str:
    return frames.response_error(
        req_id,
        exc.code,
        exc.message,
        details=exc.details,
        retryable=exc.retryable,
        retry_after_ms=exc.retry_after_ms,
        payload=payload,
    )


def shutdown_frame(reason: str, restart_expected_ms: int | None = None) -> Any:
    payload: dict[str, Any] = {"reason": reason}
    if restart_expected_ms is not None:
        payload["restartExpectedMs"] = restart_expected_ms
    return encode_event("shutdown", payload)
