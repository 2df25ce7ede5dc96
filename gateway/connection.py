"""One WebSocket connection: challenge, handshake, then requests until it closes.

Authentication: the root secret or a named token (`gateway.tokens`, looked up by the presented
token). A wrong credential is answered only after its address's delay (`FailureDelays`; every
failure and every delay is logged with the address), a right one at once. Once `hello-ok` is
queued, the server's front door lifts the connection's pre-auth byte budget and deadline
(`WebSocketTransport.authenticated`). A connection authenticated by a named token is closed with
1008 "token revoked" as soon as the token is revoked.

The socket is read by this coroutine only; everything sent goes through the connection's hub
outlet (one writer, a bounded buffer). Requests are handled concurrently (responses may come out
of order), bounded by `max_inflight` per connection, and rate-limited per connection. A handler
gets its params validated and typed; a handler that fails unexpectedly is answered `INTERNAL`
(not retryable) and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.errors import TransportClosed
from gateway.methods import HANDLERS
from gateway.methods.base import Call, ConnState, MethodError
from gateway.outlet import Outlet
from gateway.protocol import connect_rejection, frames, handshake
from gateway.protocol.codes import CloseCode, ErrorCode
from gateway.protocol.methods import (
    InvalidParams,
    expand_scopes,
    missing_scope_error,
    scope_allows,
    validate_params,
)
from gateway.tokens import Closer, NamedToken
from gateway.uvicorn_socket import server_socket
from sessions import SessionsError

if TYPE_CHECKING:
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.connection")


SLOW_CONSUMER = "slow consumer"
"""The close reason of a connection closed for falling behind (counted in `status`)."""

CLOSE_TIMEOUT_S = 3.0
"""How long a close frame may wait behind a client that does not read before the socket is
dropped without it."""


class WebSocketTransport:
    """An outlet's view of one Starlette WebSocket. Uses the server socket's direct writer and
    abort when `gateway.uvicorn_socket` recognises the server, plain ASGI otherwise."""

    def __init__(self, ws: WebSocket, *, close_timeout: float = CLOSE_TIMEOUT_S) -> None:
        self._ws = ws
        self._socket = server_socket(ws.scope)
        self._close_timeout = close_timeout
        self._closed = False

    @property
    def direct(self) -> bool:
        return self._socket is not None

    def authenticated(self) -> None:
        """Tell the server's front door the connection has authenticated (lifts its pre-auth
        byte budget and deadline; nothing to do when the server is not recognised)."""
        if self._socket is not None:
            self._socket.authenticated()

    async def send_text(self, data: str) -> None:
        try:
            await self._ws.send_text(data)
        except (WebSocketDisconnect, OSError) as exc:
            raise TransportClosed("the client went away") from exc
        except RuntimeError as exc:
            # Starlette or the server refuses a send after a close (the close raced the writer;
            # the server's front door may have closed the connection).
            if (
                self._closed
                or self._ws.application_state is WebSocketState.DISCONNECTED
                or (self._socket is not None and self._socket.closing)
            ):
                raise TransportClosed("the connection is closed") from exc
            raise

    def write_now(self, texts: Sequence[str]) -> bool:
        if self._socket is None or self._closed:
            return False
        return self._socket.write_now(texts)

    async def close(self, code: int, reason: str) -> None:
        """Close with `code`; when the close frame cannot be written within the close timeout
        (uvicorn waits for the client to drain the socket first), abort the socket."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self._ws.close(code, reason), timeout=self._close_timeout)
        except TimeoutError:
            log.warning("dropping a connection that does not read", code=code, reason=reason)
            self.abort()
        except Exception:
            self.abort()

    def abort(self) -> None:
        """Reset the connection (only possible when the server is recognised)."""
        if self._socket is not None:
            self._socket.abort()


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
    transport = WebSocketTransport(ws)

    async def close_outlet(code: int, reason: str) -> None:
        if code == CloseCode.POLICY_VIOLATION and reason == SLOW_CONSUMER:
            state.hub.slow_consumers += 1
        await transport.close(code, reason)

    outlet = Outlet(conn_id, transport, cfg.max_buffered_bytes, on_close=close_outlet)
    outlet.start()
    remote = ws.client.host if ws.client else "?"
    conn: ConnState | None = None
    tasks: set[asyncio.Task[Any]] = set()
    revoked = asyncio.Event()

    async def revoke() -> None:
        revoked.set()
        await transport.close(CloseCode.POLICY_VIOLATION, "token revoked")

    greeting = _Handshake(ws, state, outlet=outlet, transport=transport, remote=remote, revoke=revoke)
    try:
        nonce, _ts, challenge = handshake.make_challenge()
        outlet.send_raw(challenge)
        conn = await greeting.run(nonce)
        if conn is None:
            return
        state.hub.register(outlet)
        state.on_connect(conn)
        await _request_loop(ws, state, conn, tasks, revoked)
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("connection failed", conn_id=conn_id)
        with contextlib.suppress(Exception):
            await transport.close(CloseCode.INTERNAL_ERROR, "internal error")
    finally:
        greeting.detach()
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


class _Handshake:
    """The connection's handshake: `run` reads frames until `connect` is answered (or the
    connection must close); `detach` drops the connection from its named token's registry."""

    def __init__(
        self,
        ws: WebSocket,
        state: GatewayState,
        *,
        outlet: Outlet,
        transport: WebSocketTransport,
        remote: str,
        revoke: Closer,
    ) -> None:
        self.ws = ws
        self.state = state
        self.outlet = outlet
        self.transport = transport
        self.remote = remote
        self.revoke = revoke
        self.token: NamedToken | None = None

    async def run(self, nonce: str) -> ConnState | None:
        """The authenticated connection, or None when it was refused (and is being closed)."""
        state = self.state
        outlet = self.outlet
        deadline = time.monotonic() + state.limits.handshake_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await _close(outlet, CloseCode.POLICY_VIOLATION, "handshake timeout")
                return None
            try:
                raw = await asyncio.wait_for(_receive(self.ws), timeout=remaining)
            except TimeoutError:
                await _close(outlet, CloseCode.POLICY_VIOLATION, "handshake timeout")
                return None
            if raw is None:
                continue
            parsed = state.parser.parse(raw, authenticated=False)
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
            return await self._connect(parsed.id, parsed.params, nonce)

    async def _connect(self, request_id: str, params: Any, nonce: str) -> ConnState | None:
        state = self.state
        outlet = self.outlet
        if not state.ready:
            # Starting or stopping: as OpenClaw does, answer the connect and close 1013.
            refused = connect_rejection.unavailable_rejection(
                "gateway stopping; retry shortly" if state.stopping else "gateway starting; retry shortly"
            )
            outlet.send_response(refused.response(request_id))
            await _close(outlet, refused.close_code, refused.close_reason)
            return None
        try:
            named = await self._named_token(params)
        except SessionsError as exc:  # the database is busy or unreachable: retry, not a failure
            log.warning("could not look a token up", address=self.remote, error=str(exc))
            refused = connect_rejection.unavailable_rejection(
                "gateway busy; retry shortly", retry_after_ms=1000, reason="busy"
            )
            outlet.send_response(refused.response(request_id))
            await _close(outlet, refused.close_code, refused.close_reason)
            return None
        outcome = handshake.validate_connect(params or {}, nonce=nonce, auth=state.auth, named=named)
        if isinstance(outcome, handshake.ConnectAccepted) and named is not None and outcome.credential:
            if state.tokens.attach(named, outlet.conn_id, self.revoke):
                self.token = named
            else:  # revoked since it was looked up
                outcome = handshake.validate_connect(params or {}, nonce=nonce, auth=state.auth)
        if isinstance(outcome, connect_rejection.ConnectRejected):
            if outcome.auth_failure:
                await self._slow_down(outcome)
            outlet.send_response(outcome.response(request_id))
            await _close(outlet, outcome.close_code, outcome.close_reason)
            return None
        scopes = expand_scopes(outcome.scopes)
        caps = frozenset(outcome.caps)
        outlet.grant(scopes, caps)
        conn = ConnState(
            conn_id=outlet.conn_id,
            outlet=outlet,
            scopes=scopes,
            caps=caps,
            client=dict(outcome.client),
            remote=self.remote,
            credential=outcome.credential,
        )
        outlet.send_response(frames.response_ok(request_id, state.hello_ok(conn, outcome)))
        self.transport.authenticated()
        return conn

    async def _named_token(self, params: Any) -> NamedToken | None:
        """The named token the request presents (not looked up for the root token)."""
        presented = handshake.presented_token(params)
        if presented is None or self.state.auth.accepts(presented):
            return None
        return await self.state.tokens.store.find(presented)

    async def _slow_down(self, outcome: connect_rejection.ConnectRejected) -> None:
        """Log a failed authentication and hold its answer back for the address's delay."""
        delay = self.state.auth_failures.failed(self.remote)
        details = outcome.error.details if isinstance(outcome.error.details, dict) else {}
        log.warning(
            "authentication failed",
            address=self.remote,
            reason=details.get("code"),
            failures=self.state.auth_failures.failures(self.remote),
        )
        if delay > 0:
            log.warning("slowing down failed authentications", address=self.remote, delay_s=round(delay, 3))
            await asyncio.sleep(delay)

    def detach(self) -> None:
        if self.token is not None:
            self.state.tokens.detach(self.token, self.outlet.conn_id)
            self.token = None


async def _close(outlet: Outlet, code: int, reason: str) -> None:
    await outlet.drain()
    await outlet.transport.close(int(code), reason)


async def _request_loop(
    ws: WebSocket,
    state: GatewayState,
    conn: ConnState,
    tasks: set[asyncio.Task[Any]],
    revoked: asyncio.Event,
) -> None:
    limits = state.limits
    parser = state.parser
    limiter = RateLimiter(limits.requests_per_second, limits.request_burst)
    inflight = asyncio.Semaphore(limits.max_inflight)
    outlet = conn.outlet
    while not outlet.closed and not revoked.is_set():
        raw = await _receive(ws)
        if raw is None or revoked.is_set():
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
    """Answer one request. Never raises but CancelledError: whatever a handler raises becomes
    the answer (a `MethodError` as it says, anything else as `INTERNAL`, logged)."""
    outlet = conn.outlet
    if method == "connect":
        outlet.send_response(frames.response_error(req_id, "INVALID_REQUEST", "already connected"))
        return
    route = HANDLERS.get(method)
    if route is None:
        outlet.send_response(frames.response_error(req_id, "INVALID_REQUEST", f"unknown method: {method}"))
        return
    if not scope_allows(conn.scopes, method):
        shape = missing_scope_error(method)
        outlet.send_response(frames.response_error(req_id, shape.code, shape.message, details=shape.details))
        return
    checked = validate_params(method, params)
    if isinstance(checked, InvalidParams):
        shape = checked.to_error()
        outlet.send_response(frames.response_error(req_id, shape.code, shape.message, details=shape.details))
        return

    def respond_later(payload: Any | None, error: MethodError | None) -> None:
        if error is not None:
            outlet.send_response(_error_frame(req_id, error, payload=payload))
        else:
            outlet.send_response(frames.response_ok(req_id, payload))

    call = Call(state=state, conn=conn, id=req_id, method=method, respond_later=respond_later)
    try:
        payload = await route(call, checked)
    except MethodError as exc:
        outlet.send_response(_error_frame(req_id, exc))
        return
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("method failed", method=method, conn_id=conn.conn_id, request_id=req_id)
        outlet.send_response(
            frames.response_error(
                req_id,
                ErrorCode.INTERNAL,
                f"internal error while handling {method} ({type(exc).__name__}); see the gateway log",
                retryable=False,
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
