"""Recording inputs in groups: concurrent `InputLedger.record` calls share one transaction.

Every accepted message is recorded before its sender is answered. One transaction each would
queue a burst (a hundred clients sending at the same moment) behind the database's write lock,
each waiting for its own commit and disk sync in turn. Instead, requests go into a queue; one
drain task at a time records everything queued when it begins a transaction (at most
`MAX_BATCH` requests), then the next group, until the queue is empty. A lone request pays one
loop iteration more than a transaction of its own.

Each request's outcome is as if it had had a transaction to itself: its result, or the error of
its own work (`run` sets it). When a group's transaction fails as a whole, the database being
unavailable (`StoreUnavailable`: locked by another program past its busy timeout, or gone)
reaches every request of the group, and nothing of the group was recorded; any other failure has
each request of the group tried again in a transaction of its own, so that only the request that
causes it fails.

Lifetime: the drain task is made when a request finds none running and ends when the queue is
empty; it belongs to the `InputBatches`, which logs what it raises (nothing should: failures go to
the requests). A request whose caller stopped waiting before its group began is left out.

Bound: every queued request is a caller waiting for its answer, so the queue holds at most the
callers in flight (the connections' requests, each connection's under its own limit); nothing is
dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from sessions.errors import StoreUnavailable

__all__ = ["MAX_BATCH", "InputBatches", "Request"]

log = structlog.get_logger("sessions.input_batches")

MAX_BATCH = 500
"""Requests recorded in one transaction at most."""

Work = TypeVar("Work")


@dataclass(slots=True)
class Request(Generic[Work]):
    """One caller's share of a group: what to record, and where its outcome goes."""

    work: Work
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class InputBatches(Generic[Work]):
    """Runs `run(requests)` for groups of queued requests, one group at a time. `run` records
    the group in one transaction and sets each request's future; what it raises fails the group
    (see the module docstring)."""

    def __init__(self, run: Callable[[list[Request[Work]]], Awaitable[None]]) -> None:
        self._run = run
        self._queue: deque[Request[Work]] = deque()
        self._drain_task: asyncio.Task[None] | None = None

    async def submit(self, work: Work) -> Any:
        """Queue `work` and wait for its outcome (the value `run` set, or its error)."""
        request: Request[Work] = Request(work)
        self._queue.append(request)
        if self._drain_task is None:
            self._drain_task = asyncio.create_task(self._drain(), name="input-batches")
            self._drain_task.add_done_callback(self._drained)
        return await request.future

    async def _drain(self) -> None:
        while self._queue:
            group: list[Request[Work]] = []
            while self._queue and len(group) < MAX_BATCH:
                request = self._queue.popleft()
                if not request.future.done():  # its caller stopped waiting
                    group.append(request)
            if group:
                await self._record(group)

    async def _record(self, group: list[Request[Work]]) -> None:
        try:
            await self._run(group)
        except StoreUnavailable as exc:
            _fail(group, exc)
        except Exception as exc:
            if len(group) == 1:
                _fail(group, exc)
                return
            for request in group:
                if not request.future.done():
                    await self._record([request])

    def _drained(self, task: asyncio.Task[None]) -> None:
        self._drain_task = None
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("recording inputs failed", exc_info=error)
        if self._queue:  # queued after the task's last look, or left by a failure
            self._drain_task = asyncio.create_task(self._drain(), name="input-batches")
            self._drain_task.add_done_callback(self._drained)


def _fail(group: list[Request[Any]], error: BaseException) -> None:
    for request in group:
        if not request.future.done():
            request.future.set_exception(error)
