"""`Relay`: events committed on other nodes, into this node's publisher, in order and without holes.

The rule: for each session the relay hands the publisher exactly the next seq after the last one
it delivered (or saw committed here). The bus brings remote batches (`remote`), at most once and
possibly twice; the event log is the record, so whatever the bus lost is read back from it.

- A seq at or below the session's last is a duplicate and dropped.
- A seq past `last + 1` is a hole: a fill task reads the log after `last` (`read_after`) and
  delivers what it finds, in order, while the session's later events wait for it (at most
  `MAX_WAITING` per session; past that they are dropped, since the fill keeps reading the log up
  to the highest seq seen). What the log itself no longer holds (pruned events) is skipped: no one
  can deliver it. A fill whose reads keep failing gives up after `FILL_TRIES` tries, logs it, and
  keeps its waiting events: the session's next event, or the next catch-up, starts it again.
- A session the relay has not seen yet is delivered as it comes: its past is unknown here, and a
  client that subscribes replays the log itself.
- `local(event)` records this node's own committed events (the caller publishes them): after a
  take-over, the session's last is right whichever node commits next.
- `catch_up(since_ms)`, after the bus lost its subscription, reads every event the log got since
  then (minus `margin_ms`, for clocks and events still queued on their way) and offers them like
  remote ones, including sessions the relay has not seen: none of their events passed here, so
  none can be a duplicate, and a client that subscribed here during the loss needs them. Sessions
  whose last event was committed here are skipped: the journal publishes those itself, and one it
  has committed but not yet handed to `local` must not be published twice.

Sessions are remembered in LRU order, at most `max_sessions` (a session with a fill in progress is
never forgotten). Everything runs on the event loop; no method blocks its caller.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import groupby
from types import TracebackType

import structlog
from sqlalchemy import select

from gateway.background import Background
from sessions import EventPublisher, EventRecord, SessionEvent, read_event
from sessions.db import Database
from sessions.schema import events

__all__ = ["Relay", "read_since"]

log = structlog.get_logger("gateway.cluster.relay")

DEFAULT_MAX_SESSIONS = 50_000
MAX_WAITING = 10_000
"""Events held per session while its hole is being filled."""
FILL_TRIES = 3
RETRY_DELAY = 0.2
"""Seconds before the second try of a log read; doubled for each further try."""
DEFAULT_MARGIN_MS = 5_000
DEFAULT_SINCE_LIMIT = 10_000

ReadAfter = Callable[[str, int], Awaitable[list[EventRecord]]]
ReadSince = Callable[[int], Awaitable[list[EventRecord]]]


@dataclass(slots=True)
class _Track:
    """What the relay knows of one session; lives while the session is among the remembered."""

    last: int
    """The highest seq delivered here, or committed here."""
    target: int
    """The highest seq known to exist (a fill reads the log at least up to it)."""
    local: bool = False
    """The last event was committed on this node."""
    waiting: dict[int, EventRecord] = field(default_factory=dict)
    """Events past a hole, by seq, held until the fill reaches them."""
    filling: bool = False


class Relay:
    """Remote events into `publisher`, gap-free per session. Close with `aclose()` (ends fills)."""

    def __init__(
        self,
        publisher: EventPublisher,
        *,
        read_after: ReadAfter,
        read_since: ReadSince,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        margin_ms: int = DEFAULT_MARGIN_MS,
    ) -> None:
        self._publisher = publisher
        self._read_after = read_after
        self._read_since = read_since
        self.max_sessions = max_sessions
        self.margin_ms = margin_ms
        self._tracks: OrderedDict[str, _Track] = OrderedDict()
        self._tasks = Background("cluster relay")
        self.delivered = 0
        self.duplicates = 0
        self.holes = 0
        """Holes met (each starts or joins a fill)."""
        self.filled = 0
        """Events delivered from the log to fill holes."""
        self.failed_reads = 0

    @property
    def sessions(self) -> int:
        """Sessions remembered (at most `max_sessions`, plus any with a fill in progress)."""
        return len(self._tracks)

    @property
    def filling(self) -> int:
        """Fill tasks running."""
        return len(self._tasks)

    def last_seq(self, session_id: str) -> int | None:
        """The last seq delivered (or committed here) for the session; None when not remembered."""
        track = self._tracks.get(session_id)
        return None if track is None else track.last

    async def aclose(self) -> None:
        """Cancel the fills in progress. Idempotent."""
        await self._tasks.aclose()

    async def __aenter__(self) -> Relay:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- inputs ----------------------------------------------------------------------------------

    def remote(self, records: list[EventRecord]) -> None:
        """A batch from another node (in seq order per session). Never blocks, never raises."""
        for record in records:
            self._offer(record)

    def local(self, event: SessionEvent) -> None:
        """An event committed on this node; the caller publishes it. Never blocks."""
        track = self._track(event.session_id, event.seq - 1)
        if event.seq > track.last:
            track.last = event.seq
            track.target = max(track.target, event.seq)
            track.local = True
            for seq in [s for s in track.waiting if s <= event.seq]:
                del track.waiting[seq]

    async def catch_up(self, since_ms: int) -> None:
        """Deliver what the log got since `since_ms` (minus the margin) and the bus did not bring;
        see the module's rule. A failed read is tried `FILL_TRIES` times, then logged (the holes
        left are filled on the sessions' next events or the next catch-up). Never raises."""
        records = await self._read(lambda: self._read_since(since_ms - self.margin_ms), "catch-up")
        if records is None:
            return
        records.sort(key=lambda r: (r.session_id, r.seq))
        offered = 0
        for session_id, group in groupby(records, key=lambda r: r.session_id):
            track = self._tracks.get(session_id)
            if track is not None and track.local:
                continue
            for record in group:
                offered += self._offer(record)
        for session_id, track in list(self._tracks.items()):
            if track.waiting and not track.filling:
                self._start_fill(session_id, track)  # parked after failed reads
        log.info("cluster relay caught up", since_ms=since_ms, read=len(records), new=offered)

    # -- ordering --------------------------------------------------------------------------------

    def _offer(self, record: EventRecord) -> int:
        """Deliver, hold or drop one event by the rule; 1 when it was not a duplicate."""
        track = self._track(record.session_id, record.seq - 1)
        if record.seq <= track.last:
            self.duplicates += 1
            return 0
        track.local = False
        track.target = max(track.target, record.seq)
        if not track.filling and not track.waiting and record.seq == track.last + 1:
            self._deliver(track, record)
            return 1
        if len(track.waiting) < MAX_WAITING:
            track.waiting[record.seq] = record
        if not track.filling:
            self.holes += 1
            self._start_fill(record.session_id, track)
        return 1

    def _start_fill(self, session_id: str, track: _Track) -> None:
        track.filling = True
        self._tasks.spawn(self._fill(session_id, track), name=f"relay-fill-{session_id}")

    def _deliver(self, track: _Track, record: EventRecord) -> None:
        track.last = record.seq
        self.delivered += 1
        try:
            self._publisher.publish(read_event(record))
        except Exception:
            log.exception("cluster relay publisher failed", session_id=record.session_id, seq=record.seq)

    def _release_waiting(self, track: _Track, *, over_holes: bool) -> None:
        """Deliver the held events that continue `last` (all of them, in order, with
        `over_holes`); drop those already delivered."""
        for seq in sorted(track.waiting):
            if seq <= track.last:
                del track.waiting[seq]
            elif seq == track.last + 1 or over_holes:
                self._deliver(track, track.waiting.pop(seq))
            else:
                return

    async def _fill(self, session_id: str, track: _Track) -> None:
        """Read the log after `last` until the session is whole up to `target` (or the log has no
        more), delivering on the way; then release what waited. Ends with `filling` cleared."""
        try:
            while True:
                start = track.last
                found = await self._read(lambda: self._read_after(session_id, track.last), "fill")
                if found is None:
                    return  # parked: the waiting events stay for the next attempt
                for record in sorted(found, key=lambda r: r.seq):
                    if record.seq > track.last:
                        self.filled += 1
                        self._deliver(track, record)
                self._release_waiting(track, over_holes=False)
                if track.last >= track.target and not track.waiting:
                    return
                if track.last == start:
                    # The log holds nothing more after `last`: what is missing was pruned.
                    self._release_waiting(track, over_holes=True)
                    return
        finally:
            track.filling = False

    async def _read(
        self, read: Callable[[], Awaitable[list[EventRecord]]], what: str
    ) -> list[EventRecord] | None:
        """`read()`, tried up to `FILL_TRIES` times; None (logged) when every try failed."""
        for attempt in range(FILL_TRIES):
            try:
                return await read()
            except Exception as exc:
                self.failed_reads += 1
                if attempt + 1 == FILL_TRIES:
                    log.warning("cluster relay cannot read the event log", during=what, error=str(exc))
                    return None
                await asyncio.sleep(RETRY_DELAY * 2**attempt)
        return None

    def _track(self, session_id: str, last: int) -> _Track:
        """The session's track (now the most recent), made with `last` when new."""
        track = self._tracks.get(session_id)
        if track is not None:
            self._tracks.move_to_end(session_id)
            return track
        track = _Track(last=last, target=last)
        self._tracks[session_id] = track
        if len(self._tracks) > self.max_sessions:
            self._forget_oldest()
        return track

    def _forget_oldest(self) -> None:
        for session_id, track in self._tracks.items():
            if not track.filling and not track.waiting:
                del self._tracks[session_id]
                return


async def read_since(
    database: Database, since_ms: int, *, limit: int = DEFAULT_SINCE_LIMIT
) -> list[EventRecord]:
    """Events of every session stored at or after `since_ms` (epoch ms), by session and seq, at
    most `limit` (past it, a warning is logged and the rest waits for the sessions' next events).
    Raises what the database raises."""
    query = (
        select(events)
        .where(events.c.created_at >= since_ms)
        .order_by(events.c.session_id, events.c.seq)
        .limit(limit)
    )
    async with database.read() as conn:
        rows = (await conn.execute(query)).all()
    if len(rows) >= limit:
        log.warning("cluster relay catch-up truncated", since_ms=since_ms, limit=limit)
    return [
        EventRecord(
            m["session_id"], m["seq"], m["run_id"], m["type"], json.loads(m["payload"]), m["created_at"]
        )
        for m in (row._mapping for row in rows)
    ]
