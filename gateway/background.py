"""`Background`: the tasks one owner started, with their failures logged.

A task belongs to the object that started it and ends with it: `aclose()` cancels what is still
running and waits for it; `join()` waits without cancelling (for work that must finish, such as
a close frame). A task that raises is logged with its owner and name when it ends, so a failure
is never lost with the task. Cancellation is not a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger("gateway.background")


class Background:
    """A set of running tasks owned by `owner` (a name for the log)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Future[Any]] = set()
        self.failures = 0
        """Tasks that ended with an exception (since creation)."""

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run `coro` as a task of this owner. Call from a running event loop."""
        task = asyncio.create_task(coro, name=name)
        self.adopt(task)
        return task

    def adopt(self, task: asyncio.Future[Any]) -> None:
        """Take ownership of a task started elsewhere (its failure is logged, `aclose` ends it)."""
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.failures += 1
            name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
            log.error("background task failed", owner=self.owner, task=name, exc_info=exc)

    async def join(self) -> None:
        """Wait until every task has ended (failures are logged, not raised)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel every task and wait for them. Idempotent."""
        for task in list(self._tasks):
            task.cancel()
        await self.join()
