"""The live sessions in memory: loaded on use, kept while busy or recently used, then dropped.

A `LiveSession` (`sessions.live`) exists while its session is running or was used recently.
`LiveSessions` keeps them in LRU order, loads one at most once however many callers ask at the
same time, and drops the ones that are not busy: over the cap `live_cap` (least recently used
first) as soon as another is loaded, and after `live_idle_ttl_s` without use (a sweeper task owned
by this object, started by `start()` and ended by `aclose()`). The settings are read at each use,
so a config reload changes them at once.

A session's cached context (`sessions.context_cache`) goes with its live session.

A live session is busy (never dropped) while anything of it is in flight: a run, a queued
message, an operation on its lane, or an event the journal has not committed (its seq counter
must not be rebuilt from a stale `last_seq`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import structlog

from agent_core import Agent
from sessions.context_cache import ContextCache
from sessions.errors import NotFound
from sessions.journal import Journal
from sessions.lane import LaneRegistry
from sessions.live import LiveSession, RunPhase, RunState
from sessions.profiles import RunSettings
from sessions.store import Store

__all__ = ["LiveSessions"]

log = structlog.get_logger("sessions.live_cache")


class LiveSessions:
    """The live sessions of one manager. `settings()` returns the current run settings."""

    def __init__(
        self,
        store: Store,
        *,
        lanes: LaneRegistry,
        journal: Journal,
        contexts: ContextCache,
        settings: Callable[[], RunSettings],
    ) -> None:
        self._store = store
        self._contexts = contexts
        self._lanes = lanes
        self._journal = journal
        self._settings = settings
        # Most recently used last.
        self._live: OrderedDict[str, LiveSession] = OrderedDict()
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start dropping idle live sessions."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="live-session-sweeper")

    async def aclose(self) -> None:
        """Stop the sweeper. Idempotent."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[LiveSession]:
        """The live sessions now (a copy: loading or dropping one does not disturb the loop)."""
        return iter(list(self._live.values()))

    def get(self, session_id: str) -> LiveSession | None:
        """The session's live session if it is in memory (its use is not recorded)."""
        return self._live.get(session_id)

    def find_run(self, run_id: str) -> RunState | None:
        """The run of that id of any live session."""
        for live in self._live.values():
            if live.run is not None and live.run.run_id == run_id:
                return live.run
        return None

    def running_count(self) -> int:
        """Runs whose agent runs or whose outcome is being recorded."""
        return sum(
            1
            for live in self._live.values()
            if live.run is not None and live.run.phase in (RunPhase.RUNNING, RunPhase.FINISHING)
        )

    async def load(self, session_id: str) -> LiveSession:
        """The session's live session, loaded from the store when not in memory; records its
        use. Raise NotFound for an unknown session."""
        live = self._live.get(session_id)
        if live is not None:
            self._live.move_to_end(session_id)
            live.last_used = time.monotonic()
            return live
        loading = self._loading.get(session_id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[LiveSession] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            record = await self._store.tree.get_session(session_id)
            if record is None:
                raise NotFound(f"unknown session: {session_id}")
            live = LiveSession(record=record, next_seq=record.last_seq, agent=Agent())
            self._live[session_id] = live
            future.set_result(live)
            self._evict_over_cap(keep=session_id)
            return live
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters (if any) get it through the shield
            raise
        finally:
            self._loading.pop(session_id, None)

    def forget(self, live: LiveSession) -> bool:
        """Drop `live` now unless it is busy (or already replaced); True when dropped. The next
        use loads the session again from the store."""
        if self._live.get(live.session_id) is live and self._evictable(live):
            self._drop(live.session_id)
            return True
        return False

    def evict_idle(self, now: float | None = None) -> int:
        """Drop live sessions unused for `live_idle_ttl_s` that are not busy; return how many."""
        now = time.monotonic() if now is None else now
        ttl = self._settings().live_idle_ttl_s
        evicted = 0
        for sid in list(self._live):
            live = self._live[sid]
            if now - live.last_used > ttl and self._evictable(live):
                self._drop(sid)
                evicted += 1
        return evicted

    def _evictable(self, live: LiveSession) -> bool:
        sid = live.session_id
        return not live.busy and self._lanes.depth(sid) == 0 and self._journal.pending_for(sid) == 0

    def _evict_over_cap(self, *, keep: str) -> None:
        excess = len(self._live) - self._settings().live_cap
        if excess <= 0:
            return
        for sid in list(self._live):
            if excess <= 0:
                break
            if sid != keep and self._evictable(self._live[sid]):
                self._drop(sid)
                excess -= 1

    def _drop(self, session_id: str) -> None:
        del self._live[session_id]
        self._contexts.drop(session_id)

    async def _sweep(self) -> None:
        while True:
            ttl = self._settings().live_idle_ttl_s
            await asyncio.sleep(max(0.05, min(30.0, ttl / 2)))
            try:
                self.evict_idle()
            except Exception:
                log.exception("dropping idle live sessions failed")
