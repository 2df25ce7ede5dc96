"""Serialising work per session, and capping concurrent runs across sessions.

`SessionLane` runs the operations given to it one at a time, in arrival order: a chain of futures
where each operation starts when the one before it has settled (the asyncio form of a promise
chain). The lane keeps only the future of its newest operation; each waiting call holds the
future it waits on, so once the last operation settles the lane holds nothing at all.

Queue policy: a lane holds at most `max_depth` operations (running plus waiting); one more is
refused at once with `LaneFull` (retryable, with `retry_after_ms`), never queued. `depth` shows
how many there are. `LaneRegistry.max_depth` changes the bound of every lane at once.

`LaneRegistry` hands out one lane per session, made on first use and held weakly: a lane lives
exactly as long as an operation runs or waits on it (or a caller keeps it), so lanes of idle
sessions never pile up, and two callers that hold a lane at the same time always hold the same one.

`RunLimiter` caps how many runs execute at once across all sessions; waiters get slots in FIFO
order. Its queue needs no bound of its own: every waiter is the running operation of a session's
lane, so there are at most as many waiters as sessions with work. Its `limit` may change while it
is in use; raising it lets waiters in at once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from sessions.errors import LaneFull

__all__ = ["LaneRegistry", "RunLimiter", "SessionLane"]

T = TypeVar("T")

DEFAULT_MAX_DEPTH = 64
DEFAULT_RETRY_AFTER_MS = 1_000


class SessionLane:
    """Runs operations one at a time, in the order `run` was called."""

    def __init__(
        self, max_depth: int = DEFAULT_MAX_DEPTH, *, retry_after_ms: int = DEFAULT_RETRY_AFTER_MS
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        self.max_depth = max_depth
        self._retry_after_ms = retry_after_ms
        self._depth = 0
        # Settles when the newest operation has settled; None once the lane is drained.
        self._tail: asyncio.Future[None] | None = None

    @property
    def depth(self) -> int:
        """Operations running or waiting on this lane."""
        return self._depth

    async def run(self, op: Callable[[], Awaitable[T]]) -> T:
        """Call `op()` and await it once every earlier operation has settled; return its result.

        The operation's exception reaches this caller only; later operations run regardless.
        Cancelling this call while it waits drops the operation (it never runs); cancelling it
        while the operation runs cancels the operation. Either way the next one still waits for
        every earlier one. Raise LaneFull when `max_depth` operations are already here.
        """
        if self._depth >= self.max_depth:
            raise LaneFull(
                f"this session already has {self._depth} operations running or waiting",
                retry_after_ms=self._retry_after_ms,
            )
        previous = self._tail
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = mine
        self._depth += 1
        try:
            if previous is not None and not previous.done():
                # Shielded: cancelling this waiter must not cancel the chain's earlier link.
                await asyncio.shield(previous)
            return await op()
        finally:
            self._depth -= 1
            self._settle(previous, mine)

    def _settle(self, previous: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
        # A waiter cancelled early still passes its turn on only after everything before it.
        if previous is None or previous.done():
            self._release(mine)
        else:
            previous.add_done_callback(lambda _: self._release(mine))

    def _release(self, mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._tail is mine:
            self._tail = None


class LaneRegistry:
    """One lane per session id, made on first use and gone as soon as nothing holds it."""

    def __init__(
        self, max_depth: int = DEFAULT_MAX_DEPTH, *, retry_after_ms: int = DEFAULT_RETRY_AFTER_MS
    ) -> None:
        self._retry_after_ms = retry_after_ms
        self._lanes: weakref.WeakValueDictionary[str, SessionLane] = weakref.WeakValueDictionary()
        self.max_depth = max_depth

    @property
    def max_depth(self) -> int:
        """The bound of every lane: operations running plus waiting."""
        return self._max_depth

    @max_depth.setter
    def max_depth(self, value: int) -> None:
        """Change the bound of every lane, the ones alive now included (config reload). Lowering
        it lets what a lane already holds finish; only operations added later are refused."""
        if value < 1:
            raise ValueError("max_depth must be at least 1")
        self._max_depth = value
        for lane in list(self._lanes.values()):
            lane.max_depth = value

    def lane(self, session_id: str) -> SessionLane:
        """The session's lane. Call `run` on it without awaiting anything in between, or keep a
        reference for as long as you use it."""
        lane = self._lanes.get(session_id)
        if lane is None:
            lane = SessionLane(self.max_depth, retry_after_ms=self._retry_after_ms)
            self._lanes[session_id] = lane
        return lane

    async def run(self, session_id: str, op: Callable[[], Awaitable[T]]) -> T:
        """`lane(session_id).run(op)`."""
        return await self.lane(session_id).run(op)

    def depth(self, session_id: str) -> int:
        """Operations waiting or running on one session's lane (0 when it has none)."""
        lane = self._lanes.get(session_id)
        return lane.depth if lane is not None else 0

    def depths(self) -> dict[str, int]:
        """Operations running or waiting, per session that has any."""
        return {sid: lane.depth for sid, lane in list(self._lanes.items()) if lane.depth}

    def __len__(self) -> int:
        """Lanes alive (busy, or still referenced by a caller)."""
        return len(self._lanes)


class RunLimiter:
    """At most `limit` holders at once; the others wait in FIFO order.

    Use `async with limiter.slot():` (or `async with limiter:`). A slot freed while others wait
    goes straight to the first waiter, so a newcomer never overtakes them.
    """

    def __init__(self, max_concurrent: int) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self._limit = max_concurrent
        self._active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        """Change the cap (config reload). Lowering it lets current holders finish."""
        if value < 1:
            raise ValueError("the limit must be at least 1")
        self._limit = value
        self._wake()

    @property
    def active(self) -> int:
        """Slots held now."""
        return self._active

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        """Wait for a slot and take it; pair with `release()`."""
        if self._active < self._limit and not self.waiting:
            self._active += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot arrived as we were cancelled: hand it on
            else:
                self._forget(waiter)
            raise

    def release(self) -> None:
        """Give back a slot taken by `acquire()`."""
        if self._active <= 0:
            raise RuntimeError("release() without a held slot")
        self._active -= 1
        self._wake()

    def slot(self) -> _Slot:
        """An async context manager holding one slot for its block."""
        return _Slot(self)

    async def __aenter__(self) -> RunLimiter:
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def _wake(self) -> None:
        while self._waiters and self._active < self._limit:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue  # cancelled; its caller cleans up
            self._active += 1
            waiter.set_result(None)

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass


class _Slot:
    def __init__(self, limiter: RunLimiter) -> None:
        self._limiter = limiter

    async def __aenter__(self) -> None:
        await self._limiter.acquire()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._limiter.release()
