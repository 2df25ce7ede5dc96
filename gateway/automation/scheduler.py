"""The scheduler: fires the due slots of enabled jobs.

`tick()` is one pass at the time the clock gives (a seam: tests pass their own clock and call
`tick()`; the daemon passes wall time): for each enabled job it takes the slots due since the
newest one decided, lets the job's `catch_up` policy choose (`gateway.automation.catch_up`), and
fires them through the `JobRunner`. It returns when the next slot of any job falls due.

What "decided" means, and where it lives:

- a fired slot is in the database (`cron_runs`, the job's cursor): a restart, or another node
  sharing the database, never fires it again;
- a slot passed over (skipped by the policy, or dropped past `max_catch_up`) is remembered by
  this scheduler only (`_decided`, per job, for the life of the process). After a restart it is
  looked at again and, being older still, passed over again;
- a slot whose run could not be recorded because the database was busy, or the session's lane
  full, is not decided: the next tick (in `RETRY_S`) tries it again.

`run()` ticks whenever the next slot falls due, at least every `IDLE_S` (jobs that another node
added or changed are seen that way) and at once after `poke()` (a job was added or changed
here). A tick that fails is logged and retried; the loop ends only when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import msgspec
import structlog

from gateway.automation.catch_up import plan
from gateway.automation.errors import JobNotFound
from gateway.automation.job_runner import JobRunner
from gateway.automation.jobs import Job
from gateway.automation.store import AutomationStore
from sessions.errors import SessionsError

__all__ = ["IDLE_S", "RETRY_S", "Scheduler", "SchedulerSettings"]

log = structlog.get_logger("gateway.automation")

IDLE_S = 30.0
"""The longest the scheduler sleeps between ticks."""
RETRY_S = 1.0
"""How soon a tick that could not record a due slot tries again."""
_WAKE_SLACK_MS = 5
"""Sleep this much past a slot, so the tick that wakes finds it due."""


class SchedulerSettings(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    missed_after_ms: int = 60_000
    """A slot older than this (or than its job's period, when shorter) when first seen was
    missed (`cron.missed_after_s`)."""
    max_catch_up: int = 100
    """The most missed slots one job fires at once under catch-up `all`."""


class Scheduler:
    def __init__(
        self,
        store: AutomationStore,
        runner: JobRunner,
        *,
        settings: SchedulerSettings,
        clock: Callable[[], int],
        on_removed: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._runner = runner
        self.settings = settings
        self._clock = clock
        self._on_removed = on_removed
        self._decided: dict[str, int] = {}
        self._poked = asyncio.Event()
        self.next_due_ms: int | None = None
        """When the next slot of any enabled job falls due, as of the last tick."""

    def poke(self) -> None:
        """Tick soon: a job was added or changed."""
        self._poked.set()

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            self._poked.clear()
            try:
                due = await self.tick()
            except Exception:
                log.exception("the scheduler's pass failed; trying again")
                due = self._clock() + int(RETRY_S * 1000)
            delay = IDLE_S if due is None else (due - self._clock() + _WAKE_SLACK_MS) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), timeout=min(IDLE_S, max(0.0, delay)))

    async def tick(self) -> int | None:
        """Fire what is due now; return when the next slot falls due (None: no enabled job has
        one). Raises `sessions.errors` when the jobs cannot be read."""
        now = self._clock()
        jobs = await self._store.jobs()
        cursors = await self._store.cursors()
        live = {job.id for job in jobs}
        for job_id in [j for j in self._decided if j not in live]:
            del self._decided[job_id]
        next_due: int | None = None
        for job in jobs:
            if not job.enabled:
                continue
            after = max(
                job.origin_ms, cursors.get(job.id, job.origin_ms), self._decided.get(job.id, job.origin_ms)
            )
            decided = await self._fire_due(job, after, now)
            self._decided[job.id] = decided
            upcoming = (
                now + int(RETRY_S * 1000) if decided < now else job.schedule.next_after(now, job.origin_ms)
            )
            if upcoming is not None and (next_due is None or upcoming < next_due):
                next_due = upcoming
        await self._remove_finished(jobs)
        self.next_due_ms = next_due
        return next_due

    async def _fire_due(self, job: Job, after: int, now: int) -> int:
        """Fire the job's slots in `(after, now]` that its policy keeps; return the instant up
        to which its slots are decided."""
        chosen = plan(
            job.schedule,
            after_ms=after,
            now_ms=now,
            origin_ms=job.origin_ms,
            policy=job.catch_up,
            missed_after_ms=self.settings.missed_after_ms,
            max_catch_up=self.settings.max_catch_up,
        )
        if chosen.passed_over:
            log.info("missed slots passed over", job_id=job.id, job=job.name, catch_up=job.catch_up)
        for fire in chosen.fires:
            try:
                await self._runner.fire(job, fire.slot_ms, "catch-up" if fire.missed else "schedule")
            except SessionsError as exc:
                if exc.retryable:
                    log.warning("a due slot could not be recorded yet", job_id=job.id, error=str(exc))
                    return fire.slot_ms - 1
                log.error("a due slot could not run", job_id=job.id, slot=fire.slot_ms, error=str(exc))
        return now

    async def _remove_finished(self, jobs: list[Job]) -> None:
        """Remove the jobs marked `deleteAfterRun` whose last run succeeded."""
        candidates = {job.id for job in jobs if job.delete_after_run}
        if not candidates:
            return
        latest = await self._store.latest_runs()
        for job_id in candidates:
            view = latest.get(job_id)
            if view is None or view.status != "ok":
                continue
            with contextlib.suppress(JobNotFound):
                if await self._store.remove_job(job_id):
                    log.info("cron job removed after its run", job_id=job_id)
                    if self._on_removed is not None:
                        self._on_removed(job_id)
