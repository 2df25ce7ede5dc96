"""The journal: one writer that makes session events and transcript entries durable, in order,
before anyone sees them.

Every live session hands its entries and numbered events to the journal. A single writer task
commits everything that is pending in one transaction (group commit: many sessions' events share a
commit), then publishes the events in the order they were appended. Nothing is published before it
is durable, so a `seq` a client has seen is never reused after a crash.

Commits are at most one per tick (`tick_s`, 10 ms, counted from the start of the last commit):
an item appended within a tick of the last commit waits for the tick to end, so a session
streaming deltas pays one commit per tick, not one per delta, and a busy journal commits whatever
gathered while the last commit ran. An item appended after a quiet tick is committed at once, and
so is one whose producer waits for it (`commit`, `flush`, closing) or a full batch (`max_batch`
items). Each commit is one transaction with one statement per table (`Store.commit_batch`); each
event's payload is encoded to JSON once, and the published event keeps that text
(`SessionEvent.data_json`). An item may carry writes to other tables that must commit with it
(`JournalItem.extra`: the record of a run's start or end), run in the same transaction.

Producers: each session has one producer at a time (its lane), which numbers its events and
appends them without awaiting anything in between, so a session's items are queued in `seq`
order.

Queue policy: at most `max_pending` items wait; `append` waits for room (back-pressure on the
agent loops that produce events) rather than dropping anything. A commit that fails because the
database is unavailable is retried with backoff until it succeeds or the journal is closed. A
batch the store refuses for another reason is committed item by item, so only the refused item
fails (its `commit()` raises; an `append()`ed one is logged; `on_refused` hears of it: in a
cluster, a `Fenced` item means another node took the session) and the writer keeps going.
`pending` and `pending_for(session_id)` are observable.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import structlog

from sessions.errors import Fenced, StoreUnavailable
from sessions.session_events import EventPublisher, SessionEvent
from sessions.store import BatchItem, ExtraWrite, NewEntry, Store

__all__ = ["Journal", "JournalItem"]

log = structlog.get_logger("sessions.journal")

CLOSE_TIMEOUT_S = 30.0
TICK_S = 0.010
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0


class JournalItem(msgspec.Struct):
    """One session's share of a commit; an empty `session_id` marks a flush."""

    session_id: str
    entries: list[NewEntry] = msgspec.field(default_factory=list)
    events: list[SessionEvent] = msgspec.field(default_factory=list)
    session_fields: dict[str, Any] | None = None
    extra: ExtraWrite | None = None
    """Writes to other tables that commit with the item (a run's record, an input)."""
    done: asyncio.Future[None] | None = None


class Journal:
    def __init__(
        self,
        store: Store,
        publisher: EventPublisher,
        *,
        max_pending: int = 20_000,
        max_batch: int = 2_000,
        tick_s: float = TICK_S,
        on_committed: Callable[[list[JournalItem]], None] | None = None,
        on_refused: Callable[[JournalItem, BaseException], None] | None = None,
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._tick_s = tick_s
        self._queue: deque[JournalItem] = deque()
        self._per_session: dict[str, int] = {}
        # Queued items whose producer waits for them: the writer does not wait out the tick.
        self._awaited = 0
        self._last_commit_at = -math.inf
        self._wakeup = asyncio.Event()
        self._hurry = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._on_committed = on_committed
        self._on_refused = on_refused
        self.commits = 0
        self.observe_commit: Callable[[float, int], None] | None = None
        """Called with each commit's duration in seconds and its number of session items."""

    @property
    def pending(self) -> int:
        """Items queued and not yet committed."""
        return len(self._queue)

    def pending_for(self, session_id: str) -> int:
        """Items of one session queued and not yet committed."""
        return self._per_session.get(session_id, 0)

    async def start(self) -> None:
        if self._task is None and not self._closing:
            self._task = asyncio.create_task(self._writer(), name="journal-writer")

    async def append(self, item: JournalItem) -> None:
        """Queue an item for commit; waits while the journal is full. Raise StoreUnavailable
        once the journal is closing."""
        if self._closing:
            raise StoreUnavailable("the gateway is shutting down", retry_after_ms=1000)
        while len(self._queue) >= self._max_pending:
            await self._room.wait()
            if self._closing:
                raise StoreUnavailable("the gateway is shutting down", retry_after_ms=1000)
        self._push(item)

    async def commit(self, item: JournalItem) -> None:
        """Queue an item and wait until it (and everything queued before it) is committed and
        published. Raise the store's error when the store refuses this item."""
        item.done = asyncio.get_running_loop().create_future()
        await self.append(item)
        await item.done

    async def flush(self) -> None:
        """Wait until everything queued so far is committed and published."""
        await self.commit(JournalItem(session_id=""))

    async def aclose(self) -> None:
        """Refuse new items, commit what is queued (for at most 30 s), then stop the writer.
        Items still queued after that fail with StoreUnavailable. Idempotent."""
        self._closing = True
        self._room.set()  # producers waiting for room give up
        task, self._task = self._task, None
        if task is None:
            return
        drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._push(JournalItem(session_id="", done=drained))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(drained), timeout=CLOSE_TIMEOUT_S)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        while self._queue:
            self._settle(self._queue[0], StoreUnavailable("the journal was closed before this was committed"))

    # --- the writer ---------------------------------------------------------------------------

    def _push(self, item: JournalItem) -> None:
        self._queue.append(item)
        if len(self._queue) >= self._max_pending:
            self._room.clear()
        if item.session_id:
            self._per_session[item.session_id] = self._per_session.get(item.session_id, 0) + 1
        if item.done is not None:
            self._awaited += 1
            self._hurry.set()
        elif len(self._queue) >= self._max_batch:
            self._hurry.set()
        self._wakeup.set()

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        delay = FIRST_BACKOFF_S
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._wait_for_tick(loop)
            batch = [self._queue[i] for i in range(min(len(self._queue), self._max_batch))]
            self._last_commit_at = loop.time()
            try:
                await self._write(batch)
            except StoreUnavailable as exc:
                log.warning("journal commit failed, retrying", error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            except Exception:
                # One item the store refuses must not take the others (or the writer) down.
                await self._write_one_by_one(batch)
                continue
            delay = FIRST_BACKOFF_S
            for item in batch:
                self._settle(item, None)

    async def _wait_for_tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until a tick has passed since the last commit started, unless a producer waits
        for a queued item or a full batch is queued."""
        due = self._last_commit_at + self._tick_s
        while loop.time() < due and not self._awaited and len(self._queue) < self._max_batch:
            self._hurry.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(due):
                    await self._hurry.wait()

    async def _write_one_by_one(self, batch: list[JournalItem]) -> None:
        delay = FIRST_BACKOFF_S
        for item in batch:
            while True:
                try:
                    await self._write([item])
                except StoreUnavailable as exc:
                    log.warning("journal commit failed, retrying", error=str(exc), retry_in_s=delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MAX_BACKOFF_S)
                    continue
                except Exception as exc:
                    (log.warning if isinstance(exc, Fenced) else log.error)(
                        "the store refused a journal item; it is dropped",
                        session_id=item.session_id,
                        events=[e.name for e in item.events],
                        error=str(exc),
                    )
                    if self._on_refused is not None:
                        try:
                            self._on_refused(item, exc)
                        except Exception:
                            log.exception("the journal's refusal callback failed")
                    self._settle(item, exc)
                else:
                    self._settle(item, None)
                break

    async def _write(self, items: Sequence[JournalItem]) -> None:
        real: list[BatchItem] = [
            (item.session_id, item.entries, item.events, item.session_fields)
            for item in items
            if item.session_id
        ]
        extra = [item.extra for item in items if item.extra is not None]
        if real or extra:
            started = time.perf_counter()
            await (self._store.commit_batch(real, extra) if extra else self._store.commit_batch(real))
            self.commits += 1
            if self.observe_commit is not None:
                try:  # a metrics failure must not look like a refused commit
                    self.observe_commit(time.perf_counter() - started, len(real))
                except Exception:
                    log.exception("the journal's commit observer failed")

    def _settle(self, item: JournalItem, error: BaseException | None) -> None:
        """Take the (committed or refused) item off the front of the queue, publish it when it
        was committed, and wake whoever waits for it."""
        self._queue.popleft()
        if item.session_id:
            left = self._per_session.get(item.session_id, 1) - 1
            if left > 0:
                self._per_session[item.session_id] = left
            else:
                self._per_session.pop(item.session_id, None)
        if error is None:
            for event in item.events:
                try:
                    self._publisher.publish(event)
                except Exception:  # a subscriber must never stop the journal
                    log.exception("publishing a session event failed", event_name=event.name)
            if self._on_committed is not None and item.session_id:
                try:
                    self._on_committed([item])
                except Exception:
                    log.exception("the journal's commit callback failed")
        if item.done is not None:
            self._awaited -= 1
        if item.done is not None and not item.done.done():
            if error is None:
                item.done.set_result(None)
            else:
                item.done.set_exception(error)
        if len(self._queue) < self._max_pending:
            self._room.set()
