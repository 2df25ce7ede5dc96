"""A small asyncio client for the gateway protocol (used by `gatewayctl`, tests and benchmarks).

    async with GatewayClient(url, token=token) as client:
        hello = client.hello
        answer = await client.call("chat.send", {...})
        async for event in client.events():
            ...

It waits for `connect.challenge`, sends `connect`, matches responses to requests by id (several
may be in flight) and queues events (bounded; a client that does not read them drops the oldest
and counts the loss in `dropped`).

Errors (all `GatewayClientError`):

    ConnectError          the connection could not be made, or it closed (`code`, `details`)
      GatewayUnreachable  nothing answered the WebSocket upgrade at the URL
    CallError             a request answered `ok:false`
    MessageTooBig         a request larger than the gateway's `maxPayload`: refused before it is
                          sent when the limit is known from `hello-ok`, else the gateway closed
                          the connection with 1009 and this carries its reason
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import platform
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from gateway import __version__


class GatewayClientError(Exception):
    """Base of client errors."""


class ConnectError(GatewayClientError):
    """The gateway could not be reached, or refused the handshake (`code`, `details`)."""

    def __init__(self, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class GatewayUnreachable(ConnectError):
    """Nothing answered the WebSocket upgrade at the URL (refused, unresolvable, timed out, or not
    a WebSocket endpoint). The handshake never started."""


class MessageTooBig(GatewayClientError):
    """A request over the gateway's frame limit (`size` and `limit` in bytes, when known)."""

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


MESSAGE_TOO_BIG = 1009
"""The close code of a frame over the limit (RFC 6455)."""


class CallError(GatewayClientError):
    """A request answered `ok:false`."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error.get("message") or error.get("code") or "request failed"))
        self.code = str(error.get("code", ""))
        self.details = error.get("details")
        self.retryable = bool(error.get("retryable", False))
        self.retry_after_ms = error.get("retryAfterMs")
        self.error = error


class GatewayClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        password: str | None = None,
        scopes: Sequence[str] = ("operator.read", "operator.write", "operator.admin"),
        caps: Sequence[str] = ("session-scoped-events", "tool-events"),
        client_id: str = "gateway-client",
        mode: str = "cli",
        max_events: int = 100_000,
        open_timeout: float = 10.0,
        max_size: int | None = 64 * 1024 * 1024,
    ) -> None:
        self.url = url
        self.token = token
        self.password = password
        self.scopes = list(scopes)
        self.caps = list(caps)
        self.client_id = client_id
        self.mode = mode
        self.open_timeout = open_timeout
        self.max_size = max_size
        self.hello: dict[str, Any] = {}
        self.dropped = 0
        self.last_seq = 0
        self.gaps = 0
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._second: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._events: deque[dict[str, Any]] = deque()
        self._max_events = max_events
        self._event_ready = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.closed: asyncio.Event = asyncio.Event()
        self.close_code: int | None = None
        self.close_reason: str = ""

    async def __aenter__(self) -> GatewayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def connect(self) -> dict[str, Any]:
        try:
            self._ws = await websockets.connect(
                self.url, open_timeout=self.open_timeout, max_size=self.max_size, compression=None
            )
        except (OSError, websockets.exceptions.WebSocketException, TimeoutError) as exc:
            raise GatewayUnreachable(f"cannot reach the gateway at {self.url}: {exc}") from exc
        try:
            return await self._handshake()
        except BaseException:
            with contextlib.suppress(Exception):
                await self._ws.close()
            raise

    async def _handshake(self) -> dict[str, Any]:
        assert self._ws is not None
        try:
            raw = await asyncio.wait_for(self._ws.recv(), timeout=self.open_timeout)
            challenge = json.loads(raw)
            if challenge.get("type") == "res" and not challenge.get("ok"):
                # Refused before the challenge (a gateway still starting answers UNAVAILABLE).
                error = challenge.get("error") or {}
                raise ConnectError(
                    str(error.get("message", "connect refused")),
                    code=error.get("code"),
                    details=error.get("details"),
                )
            if challenge.get("event") != "connect.challenge":
                raise ConnectError("the server did not start with connect.challenge")
            params: dict[str, Any] = {
                "minProtocol": 4,
                "maxProtocol": 4,
                "client": {
                    "id": self.client_id,
                    "version": __version__,
                    "platform": platform.system().lower(),
                    "mode": self.mode,
                },
                "role": "operator",
                "scopes": self.scopes,
                "caps": self.caps,
                "auth": {"token": self.token}
                if self.token
                else ({"password": self.password} if self.password else {}),
            }
            await self._ws.send(
                json.dumps({"type": "req", "id": "connect", "method": "connect", "params": params})
            )
            raw = await asyncio.wait_for(self._ws.recv(), timeout=self.open_timeout)
            answer = json.loads(raw)
        except websockets.exceptions.ConnectionClosed as exc:
            raise ConnectError(
                f"the gateway closed the connection during the handshake ({exc.rcvd})"
            ) from exc
        except TimeoutError as exc:
            raise ConnectError("the gateway did not answer the handshake in time") from exc
        except ValueError as exc:
            raise ConnectError(f"the server at {self.url} does not speak the gateway protocol") from exc
        if not answer.get("ok"):
            error = answer.get("error") or {}
            raise ConnectError(
                str(error.get("message", "connect refused")),
                code=error.get("code"),
                details=error.get("details"),
            )
        self.hello = answer.get("payload") or {}
        self._reader = asyncio.create_task(self._read_loop())
        return self.hello

    async def aclose(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
            self._reader = None
        self._fail_pending(ConnectError("connection closed"))

    def abort(self) -> None:
        """Drop the TCP connection without a close handshake (simulates a network failure)."""
        if self._ws is not None:
            self._ws.transport.abort()

    def _fail_pending(self, exc: Exception) -> None:
        for fut in list(self._pending.values()) + list(self._second.values()):
            if not fut.done():
                fut.set_exception(exc)
        # A final answer nobody awaits (the caller may ignore `_final`) is not an error to log.
        for fut in self._second.values():
            if not fut.cancelled():
                fut.exception()
        self._pending.clear()
        self._second.clear()

    async def _read_loop(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                frame = json.loads(raw)
                kind = frame.get("type")
                if kind == "res":
                    rid = str(frame.get("id"))
                    fut = self._pending.pop(rid, None)
                    if fut is None or fut.done():
                        fut = self._second.pop(rid, None)
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
                elif kind == "event":
                    seq = frame.get("seq")
                    if isinstance(seq, int):
                        if self.last_seq and seq > self.last_seq + 1:
                            self.gaps += seq - self.last_seq - 1
                        self.last_seq = seq
                    if len(self._events) >= self._max_events:
                        self._events.popleft()
                        self.dropped += 1
                    self._events.append(frame)
                    self._event_ready.set()
        except websockets.exceptions.ConnectionClosed as exc:
            if exc.rcvd is not None:
                self.close_code = exc.rcvd.code
                self.close_reason = exc.rcvd.reason
        except Exception as exc:  # pragma: no cover - surfaced to callers below
            self._fail_pending(ConnectError(f"connection failed: {exc}"))
        finally:
            if self._ws is not None and self._ws.close_code is not None and self.close_code is None:
                self.close_code = self._ws.close_code
                self.close_reason = self._ws.close_reason or ""
            self.closed.set()
            self._event_ready.set()
            self._fail_pending(self._closed_error())

    def _closed_error(self) -> GatewayClientError:
        """What a request gets when the connection is closed (or closes under it)."""
        if self.close_code == MESSAGE_TOO_BIG:
            reason = self.close_reason or "message too big"
            return MessageTooBig(f"the gateway refused a frame: {reason}", limit=self.max_payload)
        return ConnectError(f"connection closed ({self.close_code} {self.close_reason})".strip())

    @property
    def max_payload(self) -> int | None:
        """The largest frame the gateway accepts (`hello-ok` `policy.maxPayload`), when it said."""
        policy = self.hello.get("policy")
        limit = policy.get("maxPayload") if isinstance(policy, dict) else None
        return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None

    async def request(
        self, method: str, params: Any = None, *, timeout: float | None = 60.0
    ) -> dict[str, Any]:
        """Send a request; return the raw response frame."""
        if self._ws is None or self.closed.is_set():
            raise ConnectError("not connected")
        rid = f"r{next(self._ids)}"
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[rid] = fut
        # `agent` may answer twice on one id, and the final answer of a quick run can arrive
        # before this coroutine resumes after the first: be ready for it before sending.
        second: asyncio.Future[dict[str, Any]] | None = None
        if method == "agent":
            second = loop.create_future()
            self._second[rid] = second
        frame: dict[str, Any] = {"type": "req", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        try:
            await self._send(json.dumps(frame))
        except BaseException:
            # Nobody will wait for this id: forget it, so its future's failure is not "never
            # retrieved" when the connection closes.
            for table in (self._pending, self._second):
                dropped = table.pop(rid, None)
                if dropped is not None:
                    dropped.cancel()
            raise
        try:
            response = await asyncio.wait_for(asyncio.shield(fut), timeout=timeout)
        except TimeoutError:
            self._pending.pop(rid, None)
            self._second.pop(rid, None)
            raise
        if (
            second is not None
            and response.get("ok")
            and (response.get("payload") or {}).get("status") == "accepted"
        ):
            response["_final"] = second
        else:
            self._second.pop(rid, None)
        return response

    async def _send(self, text: str) -> None:
        """Send one frame. Raises MessageTooBig for a frame over the gateway's limit (before
        sending it, when the limit is known) and ConnectError when the connection is gone."""
        assert self._ws is not None
        limit = self.max_payload
        size = len(text.encode("utf-8"))
        if limit is not None and size > limit:
            raise MessageTooBig(
                f"the request is {size:,} bytes and the gateway accepts at most {limit:,} bytes per frame",
                size=size,
                limit=limit,
            )
        try:
            await self._ws.send(text)
        except websockets.exceptions.ConnectionClosed:
            # The reader records why (a close frame may be on its way): give it a moment.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closed.wait(), timeout=2.0)
            raise self._closed_error() from None

    async def call(self, method: str, params: Any = None, *, timeout: float | None = 60.0) -> Any:
        """Send a request; return its payload or raise `CallError`."""
        response = await self.request(method, params, timeout=timeout)
        if not response.get("ok"):
            raise CallError(response.get("error") or {})
        return response.get("payload")

    async def next_event(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next queued event, or None when the connection closed (or on timeout)."""
        while not self._events:
            if self.closed.is_set():
                return None
            self._event_ready.clear()
            try:
                await asyncio.wait_for(self._event_ready.wait(), timeout=timeout)
            except TimeoutError:
                return None
        return self._events.popleft()

    async def events(self, timeout: float | None = None) -> AsyncIterator[dict[str, Any]]:
        while True:
            event = await self.next_event(timeout)
            if event is None:
                return
            yield event

    def drain_events(self) -> list[dict[str, Any]]:
        out = list(self._events)
        self._events.clear()
        return out
