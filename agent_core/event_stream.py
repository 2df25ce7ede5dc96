"""`EventStream`: a single-consumer async stream with a final result (pi-ai's EventStream).

Semantics follow pi exactly: `push` after completion is dropped; the completing event (the one for
which `is_complete` is true) is still delivered and sets the result; `end(result)` closes the
stream and, when given one, sets the result; iteration yields what is queued and then stops.

Queue policy: unbounded. A stream has one producer (a provider or the loop) and one consumer that
drains it as fast as events arrive; back-pressure would stall an HTTP read for no gain. `len()`
gives the number of queued events.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

from agent_core.events import AssistantMessageEvent, DoneEvent, ErrorEvent
from agent_core.messages import AssistantMessage

T = TypeVar("T")
R = TypeVar("R")

_UNSET = object()


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

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def done(self) -> bool:
        return self._done

    def push(self, event: T) -> None:
        if self._done:
            return
        if self._is_complete is not None and self._is_complete(event):
            self._done = True
            if self._extract_result is not None:
                self._set_result(self._extract_result(event))
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

    async def result(self) -> R:
        """The final result; waits until the completing event or `end(result)`."""
        while self._result is _UNSET:
            if self._error is not None:
                raise self._error
            waiter = asyncio.get_running_loop().create_future()
            self._result_waiters.append(waiter)
            await waiter
        return self._result  # type: ignore[return-value]

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        while True:
            while self._queue:
                yield self._queue.popleft()
            if self._done:
                if self._error is not None:
                    raise self._error
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


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
