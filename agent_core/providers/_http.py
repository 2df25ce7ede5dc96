"""HTTP plumbing of the streaming providers: retries with backoff, timeouts, abort.

pi hands these jobs to the vendors' SDKs; we have no SDK, so the rules are ours, modelled on
theirs:

- A request is retried when the server answers 408, 409, 429 or 5xx (unless it says
  ``x-should-retry: false``), when the connection fails or times out before the response
  arrives, and when the body breaks before its first byte. Retries are invisible to the caller.
- The wait honours ``retry-after-ms`` and ``Retry-After`` (seconds or an HTTP date); otherwise it
  is exponential (0.5 s, 1 s, 2 s ... capped at 8 s, with jitter). A server that asks for longer
  than `max_retry_delay_ms` is not waited for: the request fails with a message that says so.
- `timeout_ms` bounds connecting and every single read, so a stream that stalls fails.
- An abort must reach a read blocked in another task: `AbortScope` registers a listener on the
  signal that cancels the task doing the I/O, and turns that cancellation back into a normal
  return so the provider can finish the partial message.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import random
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from types import TracebackType
from typing import Any

import httpx

from agent_core.abort import AbortSignal
from agent_core.errors import ProviderError
from agent_core.llm import StreamOptions
from agent_core.providers._common import PRODUCER_TASK_PREFIX, RequestOutcome, request_observers

DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_RETRY_DELAY_MS = 60_000
DEFAULT_TIMEOUT_MS = 600_000
_INITIAL_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 8.0

ABORTED_MESSAGE = "Request was aborted"


class HttpStatusError(ProviderError):
    """The server answered with an error status (after any retries)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class TransportError(ProviderError):
    """The connection failed, timed out or broke mid-body."""


ErrorFormatter = Callable[[int, str], str]
"""(status, body text) -> the error message the provider reports."""


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs tens of milliseconds; every request shares one context.
    return httpx.create_ssl_context()


def _is_retryable_status(status: int, headers: httpx.Headers) -> bool:
    should = headers.get("x-should-retry")
    if should == "true":
        return True
    if should == "false":
        return False
    return status in (408, 409, 429) or status >= 500


def server_retry_delay_ms(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait the server asked for, in milliseconds, or None when it asked for none."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms)
        except ValueError:
            value = -1.0
        if value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    seconds: float
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds * 1000)


def backoff_delay_ms(retry_index: int) -> float:
    """Exponential backoff with jitter for the `retry_index`-th retry (0-based)."""
    delay = min(_INITIAL_BACKOFF_S * 2.0**retry_index, _MAX_BACKOFF_S)
    return delay * (1 - 0.25 * random.random()) * 1000


def _transport_message(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "Request timed out"
    detail = str(exc) or type(exc).__name__
    return f"Connection error: {detail}"


class HttpStream:
    """One streaming POST with retries. Use as ``async with``; the response is closed on exit.

    `open()` sends the request (retrying as described in the module docstring) and returns once a
    2xx response has arrived; `chunks()` then yields the body. A body that fails before its first
    byte is re-requested transparently while retries remain.
    """

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        body: Mapping[str, Any],
        options: StreamOptions,
        format_error: ErrorFormatter,
    ) -> None:
        self._url = url
        self._headers = dict(headers)
        self._body = body
        self._options = options
        self._format_error = format_error
        timeout_s = (options.timeout_ms if options.timeout_ms is not None else DEFAULT_TIMEOUT_MS) / 1000
        self._client = httpx.AsyncClient(verify=_ssl_context(), timeout=httpx.Timeout(timeout_s))
        self._response: httpx.Response | None = None
        self._max_retries = max(
            0, options.max_retries if options.max_retries is not None else DEFAULT_MAX_RETRIES
        )
        self._max_delay_ms = (
            options.max_retry_delay_ms
            if options.max_retry_delay_ms is not None
            else DEFAULT_MAX_RETRY_DELAY_MS
        )
        self._retries = 0
        self.request_count = 0

    async def __aenter__(self) -> HttpStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the response and the client. Idempotent."""
        response, self._response = self._response, None
        try:
            if response is not None:
                await response.aclose()
        finally:
            await self._client.aclose()

    def _report(self, status: str, *, retrying: bool = False, final: bool = False) -> None:
        observers = request_observers()
        if not observers:
            return
        # The stream's producer task is named after the provider and model it streams.
        task = asyncio.current_task()
        owner = task.get_name() if task is not None else ""
        provider, _, model = owner.removeprefix(PRODUCER_TASK_PREFIX).partition("/")
        if not owner.startswith(PRODUCER_TASK_PREFIX):
            provider, model = "unknown", str(self._body.get("model") or "unknown")
        outcome = RequestOutcome(
            provider=provider, model=model, status=status, retrying=retrying, final=final
        )
        for observer in observers:
            observer(outcome)

    def _notify(self) -> None:
        if self._options.on_event is not None:
            self._options.on_event()

    async def open(self) -> httpx.Response:
        """Send until a 2xx response arrives. Raises `HttpStatusError` or `TransportError`."""
        while True:
            self.request_count += 1
            request = self._client.build_request("POST", self._url, headers=self._headers, json=self._body)
            try:
                response = await self._client.send(request, stream=True)
            except httpx.TransportError as exc:
                await self._retry_or_raise(TransportError(_transport_message(exc)), None)
                continue
            self._notify()
            if response.is_success:
                self._report(str(response.status_code))
                self._response = response
                return response
            try:
                text = (await response.aread()).decode("utf-8", errors="replace")
            except httpx.TransportError:
                text = ""
            finally:
                await response.aclose()
            error = HttpStatusError(self._format_error(response.status_code, text), response.status_code)
            if not _is_retryable_status(response.status_code, response.headers):
                self._report(str(response.status_code), final=True)
                raise error
            await self._retry_or_raise(error, response.headers)

    async def _retry_or_raise(self, error: ProviderError, headers: httpx.Headers | None) -> None:
        status = str(error.status) if isinstance(error, HttpStatusError) else "transport_error"
        if self._retries >= self._max_retries:
            self._report(status, final=True)
            raise error
        requested = server_retry_delay_ms(headers) if headers is not None else None
        if requested is not None and requested > self._max_delay_ms:
            self._report(status, final=True)
            raise ProviderError(
                f"Server requested {requested / 1000:g}s retry delay "
                f"(max: {self._max_delay_ms / 1000:g}s): {error}"
            ) from error
        delay = (
            requested if requested is not None else min(backoff_delay_ms(self._retries), self._max_delay_ms)
        )
        self._report(status, retrying=True)
        self._retries += 1
        await asyncio.sleep(delay / 1000)

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body of the opened response. Raises `TransportError` when it breaks."""
        received = False
        while True:
            response = self._response
            if response is None:
                raise RuntimeError("HttpStream.chunks() before open()")
            try:
                async for chunk in response.aiter_bytes():
                    if not chunk:
                        continue
                    received = True
                    self._notify()
                    yield chunk
                return
            except httpx.TransportError as exc:
                error = TransportError(_transport_message(exc))
                if received:
                    self._report("transport_error", final=True)
                    raise error from exc
                self._response = None
                await response.aclose()
                await self._retry_or_raise(error, None)
                await self.open()


class AbortScope:
    """Lets an abort signal interrupt the I/O of the current task.

    While inside ``async with AbortScope(signal)``, aborting the signal (from any task) cancels
    the current task; the scope absorbs that cancellation, so the code after the block runs and
    finds `signal.aborted` set. A cancellation that did not come from the signal propagates.
    """

    def __init__(self, signal: AbortSignal | None) -> None:
        self._signal = signal
        self._task: asyncio.Task[Any] | None = None
        self._remove: Callable[[], None] | None = None
        self.triggered = False

    async def __aenter__(self) -> AbortScope:
        self._task = asyncio.current_task()
        if self._signal is not None and self._task is not None:
            self._remove = self._signal.add_listener(self._on_abort)
        return self

    def _on_abort(self) -> None:
        if self._task is not None and not self._task.done() and not self.triggered:
            self.triggered = True
            self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._remove is not None:
            self._remove()
            self._remove = None
        if not self.triggered or self._task is None:
            return False
        if exc_type is None:
            # The abort came after the last await of the block: absorb the pending cancellation.
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                pass
        if self._task.uncancel() > 0:
            return False  # someone else cancelled us too: let it propagate
        return exc_type is None or issubclass(exc_type, (asyncio.CancelledError, httpx.TransportError))
