"""`EventStream`: a single-consumer async stream with a final result (pi-ai's EventStream).

Semantics follow pi exactly: `push` after completion is dropped; the completing event (the one for
which `is_complete` is true) is still delivered and sets the result; `end(result)` closes the
stream and, when given one, sets the result; iteration yields what is queued and then stops.

Unlike pi's, a stream can own the task that produces its events (`start`), so that the producer
ends when its consumer stops. The rules, from the consumer's side:

- `aclose()` (or leaving ``async with stream``) cancels the producer unless the stream has
  already completed, then waits until the producer task has finished.
- An iteration abandoned before the stream's end (the consumer broke out of ``async for``,
  raised or was cancelled inside it) cancels the producer too, at once when the iteration fails
  and when the iterator is finalised after a ``break``; call `aclose()` to also wait for it.
- A producer that completed the stream is never cancelled: it may still be cleaning up (closing
  an HTTP response), and iterating to the end or awaiting `result()` waits for it to finish.
- A producer task that ends without completing the stream fails it (unless the `on_unfinished`
  given to `start` completes it), so no consumer is left waiting; a producer that raises is
  logged.
- `abandon()` stops consuming without waiting: the producer is cancelled unless the stream has
  completed.

A consumer may `listen(on_event)` instead of iterating: every event then goes to the callback from
`push` itself, with no task switch in between (a stream that forwards another's events pays no
extra hop per event).

Lifetimes: the producer task runs from `start` until it returns or is cancelled; the stream is its
only owner and keeps the reference as long as the stream lives.

Queue policy: unbounded. A stream has one producer (a provider or the loop) and one consumer that
drains it as fast as events arrive; back-pressure would stall an HTTP read for no gain. `len()`
gives the number of queued events (none once a listener takes them).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from agent_core.errors import AgentCoreError
from agent_core.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agent_core.messages import AssistantMessage

T = TypeVar("T")
R = TypeVar("R")

_UNSET = object()

log = logging.getLogger(__name__)


class EventStream(Generic[T, R]):
    def __init__(
        self,
        is_complete: Callable[[T], bool] | None = None,
        extract_result: Callable[[T], R] | None = None,
    ) -> None:
        self._is_complete = is_complete
        self._extract_result = extract_result
        self._queue: deque[T] = deque()
        self._done = False
        self._waiter: asyncio.Future[None] | None = None
        self._result: object = _UNSET
        self._error: BaseException | None = None
        self._result_waiters: list[asyncio.Future[None]] = []
        self._producer: asyncio.Task[None] | None = None
        self._on_unfinished: Callable[[asyncio.Task[None]], None] | None = None
        self._listener: Callable[[T], None] | None = None

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def producing(self) -> bool:
        """True while the producer task given to `start` is still running."""
        return self._producer is not None and not self._producer.done()

    # --- the producer's side ---------------------------------------------------------------------

    def start(
        self,
        produce: Coroutine[Any, Any, None],
        *,
        name: str | None = None,
        on_unfinished: Callable[[asyncio.Task[None]], None] | None = None,
    ) -> None:
        """Run `produce` (which pushes this stream's events) as a task the stream owns; see the
        module docstring. Needs a running event loop; raises `RuntimeError` if the stream already
        has a producer.

        `on_unfinished(task)` is called when the task ends without having completed the stream
        (it may have been cancelled before it ever ran): it may complete the stream its own way;
        otherwise the stream fails.
        """
        if self._producer is not None:
            produce.close()
            raise RuntimeError("This stream already has a producer")
        task = asyncio.get_running_loop().create_task(produce, name=name)
        self._producer = task
        self._on_unfinished = on_unfinished
        task.add_done_callback(self._producer_finished)

    def _producer_finished(self, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            log.error("stream producer %s failed", task.get_name(), exc_info=error)
        on_unfinished, self._on_unfinished = self._on_unfinished, None
        if not self._done and on_unfinished is not None:
            on_unfinished(task)
        if not self._done:
            how = "was cancelled" if task.cancelled() else "ended"
            self.fail(error or AgentCoreError(f"The stream's producer {how} without completing it"))

    def push(self, event: T) -> None:
        if self._done:
            return
        if self._is_complete is not None and self._is_complete(event):
            self._done = True
            if self._extract_result is not None:
                self._set_result(self._extract_result(event))
        if self._listener is not None:
            self._listener(event)
            return
        self._queue.append(event)
        self._wake()

    def end(self, result: R | None = None) -> None:
        """Close the stream; `result` (when not None) becomes the final result."""
        self._done = True
        if result is not None and self._result is _UNSET:
            self._set_result(result)
        self._wake()

    def fail(self, error: BaseException) -> None:
        """Close the stream with an error: iteration raises it after the queued events, and so
        does `result()`. (pi has no such path and hangs instead; see agent_loop.)"""
        if self._error is None and self._result is _UNSET:
            self._error = error
        self._done = True
        self._wake()
        for waiter in self._result_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._result_waiters.clear()

    def _set_result(self, result: R) -> None:
        self._result = result
        for waiter in self._result_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._result_waiters.clear()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- the consumer's side ---------------------------------------------------------------------

    def listen(self, on_event: Callable[[T], None]) -> None:
        """Consume by callback: `on_event` gets the queued events at once, then every event as it
        is pushed, synchronously (it must not raise: it runs inside the producer's `push`).
        `result()` still tells the end. Raises `RuntimeError` if the stream has a listener or is
        being iterated."""
        if self._listener is not None or self._waiter is not None:
            raise RuntimeError("This stream already has a consumer")
        self._listener = on_event
        while self._queue:
            on_event(self._queue.popleft())

    async def result(self) -> R:
        """The final result; waits until the completing event or `end(result)`, then for the
        producer task (if any) to finish."""
        while self._result is _UNSET:
            if self._error is not None:
                raise self._error
            waiter = asyncio.get_running_loop().create_future()
            self._result_waiters.append(waiter)
            await waiter
        await self._settle()
        return self._result  # type: ignore[return-value]

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        finished = False
        try:
            while True:
                while self._queue:
                    yield self._queue.popleft()
                if self._done:
                    finished = True
                    await self._settle()
                    if self._error is not None:
                        raise self._error
                    return
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
        finally:
            if not finished:
                self.abandon()

    def abandon(self) -> None:
        """Stop consuming without waiting: a producer still feeding the stream is cancelled."""
        producer = self._producer
        if producer is not None and not producer.done() and not self._done:
            producer.cancel()

    async def _settle(self) -> None:
        producer = self._producer
        if producer is not None and not producer.done() and producer is not asyncio.current_task():
            await asyncio.wait({producer})

    async def aclose(self) -> None:
        """Stop consuming: cancel the producer unless the stream has completed, and wait until it
        has finished. Idempotent; nothing to do for a stream without a producer."""
        producer = self._producer
        if producer is None or producer is asyncio.current_task():
            return
        self.abandon()
        if not producer.done():
            await asyncio.wait({producer})

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _assistant_complete(event: AssistantMessageEvent) -> bool:
    return event.type in ("done", "error")


def _assistant_result(event: AssistantMessageEvent) -> AssistantMessage:
    if isinstance(event, DoneEvent):
        return event.message
    if isinstance(event, ErrorEvent):
        return event.error
    raise ValueError(f"unexpected completing event {event.type}")


class AssistantMessageEventStream(EventStream[AssistantMessageEvent, AssistantMessage]):
    """The stream a provider returns: complete on `done` or `error`."""

    def __init__(self) -> None:
        super().__init__(_assistant_complete, _assistant_result)
