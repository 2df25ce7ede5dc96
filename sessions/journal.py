"""The journal: one writer that makes session events and transcript entries durable, in order,
before anyone sees them.

Every live session hands its entries and numbered events to the journal. A single writer task
commits everything that is pending in one transaction (group commit: under load many sessions'
events share a commit), then publishes the events in the order they were appended. Nothing is
published before it is durable, so a `seq` a client has seen is never reused after a crash.

Queue policy: at most `max_pending` items wait; `append` waits for room (back-pressure on the
agent loops that produce events) rather than dropping anything. A failed commit is retried with
backoff until it succeeds or the journal is closed; `pending` is observable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from sessions.errors import StoreUnavailable
from sessions.session_events import EventPublisher, SessionEvent
from sessions.store import NewEntry, NewEvent, Store

log = structlog.get_logger("sessions.journal")


@dataclass(slots=True)
class JournalItem:
    session_id: str
    entries: list[NewEntry] = field(default_factory=list)
    events: list[SessionEvent] = field(default_factory=list)
    session_fields: dict[str, Any] | None = None
    done: asyncio.Future[None] | None = None


class Journal:
    def __init__(
        self,
        store: Store,
        publisher: EventPublisher,
        *,
        max_pending: int = 20_000,
        max_batch: int = 2_000,
        on_committed: Callable[[list[JournalItem]], None] | None = None,
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._queue: deque[JournalItem] = deque()
        self._wakeup = asyncio.Event()
        self._room = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._on_committed = on_committed
        self.commits = 0

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._writer(), name="journal-writer")

    async def append(self, item: JournalItem) -> None:
        """Queue an item for commit; waits while the journal is full."""
        if self._closing:
            raise StoreUnavailable("the gateway is shutting down", retry_after_ms=1000)
        if len(self._queue) >= self._max_pending:
            async with self._room:
                await self._room.wait_for(lambda: len(self._queue) < self._max_pending)
        self._queue.append(item)
        self._wakeup.set()

    async def commit(self, item: JournalItem) -> None:
        """Queue an item and wait until it (and everything queued before it) is committed."""
        item.done = asyncio.get_running_loop().create_future()
        await self.append(item)
        await item.done

    async def flush(self) -> None:
        """Wait until everything queued so far is committed and published."""
        await self.commit(JournalItem(session_id=""))

    async def aclose(self) -> None:
        """Commit what is queued, then stop the writer. Idempotent."""
        if self._task is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), timeout=30)
        self._closing = True
        task, self._task = self._task, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _writer(self) -> None:
        delay = 0.05
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = [self._queue[i] for i in range(min(len(self._queue), self._max_batch))]
            real = [item for item in batch if item.session_id]
            try:
                if real:
                    await self._store.commit_batch(
                        [
                            (
                                item.session_id,
                                item.entries,
                                [_new_event(e) for e in item.events],
                                item.session_fields,
                            )
                            for item in real
                        ]
                    )
            except StoreUnavailable as exc:
                log.warning("journal commit failed, retrying", error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            for _ in batch:
                self._queue.popleft()
            self.commits += 1
            async with self._room:
                self._room.notify_all()
            for item in real:
                for event in item.events:
                    try:
                        self._publisher.publish(event)
                    except Exception:  # a subscriber must never stop the journal
                        log.exception("publishing a session event failed", event=event.name)
            if self._on_committed is not None:
                self._on_committed(real)
            for item in batch:
                if item.done is not None and not item.done.done():
                    item.done.set_result(None)


def _new_event(event: SessionEvent) -> NewEvent:
    payload = dict(event.data)
    payload["ts"] = event.ts
    if event.session_key is not None:
        payload["sessionKey"] = event.session_key
    return NewEvent(seq=event.seq, type=event.name, payload=payload, run_id=event.run_id)
