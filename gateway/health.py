"""`SessionsSummary`: what `health` reports of the sessions (how many, the five most recently
updated), kept in memory so that `health` costs no database round trip.

The summary is read from the store once, when first asked for, and again in the background when
it may have changed (`stale()`: a session was created, changed or deleted, a run started or
ended), at most once every `min_interval_s`: a busy gateway reads it about once a second, an idle
one never. Between reads `health` answers what was last read, so a change shows up within about
that interval. The refresh task belongs to the summary's `Background` and ends with `aclose()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from gateway.background import Background
from sessions import SessionRecord

MIN_INTERVAL_S = 1.0
"""Least time between two reads of the summary."""
RECENT = 5
"""How many recently updated sessions `health` lists."""

LoadSessions = Callable[[int], Awaitable[tuple[Sequence[SessionRecord], int]]]
"""The `limit` most recently updated sessions and the total count (`Store.tree.list_sessions`)."""


class Summary(msgspec.Struct, frozen=True):
    recent: Sequence[SessionRecord]
    count: int


class SessionsSummary:
    """The sessions part of `health`, from memory; `stale()` has it read again soon."""

    def __init__(
        self,
        load: LoadSessions,
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._summary: Summary | None = None
        self._read_at = float("-inf")
        self._dirty = False
        self._refreshing: asyncio.Task[None] | None = None
        self._tasks = Background("health summary")
        self.reads = 0
        """Reads of the store so far."""

    async def current(self) -> Summary:
        """The summary last read (read now only the first time). Raises what the store raises
        on that first read."""
        if self._summary is None:
            await self._read()
        assert self._summary is not None
        return self._summary

    def stale(self) -> None:
        """The sessions may have changed: read them again in the background (coalesced)."""
        self._dirty = True
        if self._refreshing is None and self._summary is not None:
            self._refreshing = self._tasks.spawn(self._refresh(), name="health-summary")

    async def _refresh(self) -> None:
        try:
            while self._dirty:
                wait = self._read_at + self._min_interval_s - self._clock()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._read()
        finally:
            self._refreshing = None

    async def _read(self) -> None:
        self._dirty = False
        self._read_at = self._clock()
        records, total = await self._load(RECENT)
        self.reads += 1
        self._summary = Summary(recent=tuple(records), count=total)

    async def aclose(self) -> None:
        """Stop a refresh in progress. Idempotent."""
        await self._tasks.aclose()
