"""`Automation`: the daemon's cron jobs and webhooks, from start to stop.

`Gateway.start()` builds it once the session manager and the chat bindings exist
(`Automation.build`), and starts it after them: the scheduler must not fire before the manager
takes inputs. `Gateway.drain()` closes it first, so nothing new fires while runs wind down.

What it owns, and how long each lives:

- the scheduler's loop and the housekeeping loop (old runs pruned, expired delivery ids swept,
  hourly), as tasks of `background`: a failure is logged, `aclose()` ends them;
- the webhook endpoint (`webhooks`, mounted by the app under `/hooks`);
- a bridge listener that turns the end of a run it started into a `cron` event (`finished`);
  the run ids it follows are kept until their run ends, at most `FOLLOWED` of them.

What the `cron.*` methods ask of it is here too: each change is stored, wakes the scheduler and
is announced to `operator.read` connections as a `cron` event
(`{action: added|updated|removed|started|finished, jobId, runId?, status?}`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from gateway.automation.errors import InvalidJob
from gateway.automation.job_list import JobsQuery, RunsQuery, job_object, jobs_page, runs_page
from gateway.automation.job_runner import Fired, JobRunner, Trigger
from gateway.automation.jobs import Job, new_job, patched
from gateway.automation.launcher import Launcher
from gateway.automation.scheduler import Scheduler, SchedulerSettings
from gateway.automation.store import AutomationStore
from gateway.automation.webhooks import Webhooks, load_hooks
from gateway.background import Background
from gateway.hub import encode_event
from sessions import AgentFinished, Outcome, SessionEvent
from sessions.ids import new_id

if TYPE_CHECKING:
    from bindings import ReplyRoute
    from gateway.channels import Channels
    from gateway.config import GatewayConfig
    from gateway.state import GatewayState

__all__ = ["Automation"]

log = structlog.get_logger("gateway.automation")

HOUSEKEEPING_S = 3600.0
FOLLOWED = 4096
"""Runs whose end becomes a `cron` event, at most (the oldest are forgotten first)."""


def wall_ms() -> int:
    return int(time.time() * 1000)


class _ChannelReplies:
    """The running chat bindings, for deliveries."""

    def __init__(self, channels: Channels) -> None:
        self._channels = channels

    def running(self) -> list[tuple[str, str]]:
        return [(binding.platform, binding.account_id) for binding in self._channels.bindings.values()]

    def follow(self, run_id: str, binding_id: str, session_key: str, route: ReplyRoute) -> None:
        from gateway.channel_replies import Owner  # loaded with the bindings

        self._channels.feed.claim(run_id, Owner(binding_id=binding_id, session_key=session_key, route=route))


class Automation:
    def __init__(
        self,
        *,
        state: GatewayState,
        config: GatewayConfig,
        env: Mapping[str, str],
        channels: Channels | None = None,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        """Raises ConfigError for a `[webhooks]` table whose secrets are not set."""
        self._state = state
        self._config = config
        self._env = env
        self._clock = clock
        self.store = AutomationStore(state.store.database, clock=clock)
        self.launcher = Launcher(
            lambda: state.manager,
            replies=_ChannelReplies(channels) if channels is not None else None,
            on_started=lambda session_id: state.bridge.session_changed(session_id, "send"),
        )
        self.runner = JobRunner(self.store, self.launcher, on_fired=self._fired)
        self.scheduler = Scheduler(
            self.store,
            self.runner,
            settings=_scheduler_settings(config),
            clock=clock,
            on_removed=lambda job_id: self._announce("removed", job_id),
        )
        self.webhooks = Webhooks(load_hooks(config, env), store=self.store, launcher=self.launcher)
        self.background = Background("automation")
        self._followed: OrderedDict[str, str] = OrderedDict()
        self._last_fired: dict[str, str] = {}
        """Per job, the run this process last started for it."""
        self._remove_listener: Callable[[], None] | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler (unless `cron.enabled` is off) and the housekeeping. Call after
        the session manager started."""
        if self._closed or self._remove_listener is not None:
            return
        self._remove_listener = self._state.bridge.add_listener(self._on_event, remote=True)
        if self._config.cron.enabled:
            self.background.spawn(self.scheduler.run(), name="cron-scheduler")
        self.background.spawn(self._housekeeping(), name="automation-housekeeping")

    async def aclose(self) -> None:
        """Stop firing and end every task. Idempotent."""
        self._closed = True
        if self._remove_listener is not None:
            self._remove_listener()
        await self.background.aclose()

    def prepare_reload(self, config: GatewayConfig) -> Callable[[], None]:
        """Check a re-read `[cron]` and `[webhooks]` and return what applies them (turning the
        scheduler on or off needs a restart). Raises ConfigError for a hook whose secret is
        unset; nothing is applied then."""
        hooks = load_hooks(config, self._env)

        def apply() -> None:
            self.webhooks.replace(hooks)
            self.scheduler.settings = _scheduler_settings(config)
            self._config = config
            self.scheduler.poke()

        return apply

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_S)
            try:
                pruned = await self.store.prune_runs(self._config.cron.keep_runs)
                swept = await self.store.sweep_deliveries()
            except Exception:  # the next round tries again
                log.exception("automation housekeeping failed")
            else:
                if pruned or swept:
                    log.debug("automation rows removed", runs=pruned, deliveries=swept)

    # -- jobs, for the cron.* methods ----------------------------------------------------------

    async def add(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Raises InvalidJob (also for an unknown agent)."""
        now = self._clock()
        job = new_job(spec, job_id=new_id(), now_ms=now, default_agent=self._state.directory.default_agent_id)
        self._check_agent(job)
        await self.store.add_job(job)
        self._announce("added", job.id)
        self.scheduler.poke()
        return job_object(job, None, now)

    async def update(self, job_id: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Raises JobNotFound, InvalidJob."""
        now = self._clock()
        job = patched(await self.store.get_job(job_id), patch, now_ms=now)
        self._check_agent(job)
        await self.store.save_job(job)
        self._announce("updated", job.id)
        self.scheduler.poke()
        return job_object(job, (await self.store.latest_runs()).get(job.id), now)

    async def remove(self, job_id: str) -> bool:
        removed = await self.store.remove_job(job_id)
        if removed:
            self._announce("removed", job_id)
        return removed

    async def get(self, job_id: str) -> dict[str, Any]:
        """Raises JobNotFound."""
        job = await self.store.get_job(job_id)
        return job_object(job, (await self.store.latest_runs()).get(job.id), self._clock())

    async def list(self, query: JobsQuery) -> dict[str, Any]:
        return jobs_page(await self.store.jobs(), await self.store.latest_runs(), query, self._clock())

    async def runs(
        self, job_id: str | None, query: RunsQuery, *, agent_id: str | None = None
    ) -> dict[str, Any]:
        jobs = await self.store.jobs()
        names = {job.id: job.name for job in jobs}
        views = await self.store.run_views(job_id=job_id)
        if agent_id is not None:
            agents = {job.id: job.agent_id for job in jobs}
            views = [view for view in views if agents.get(view.job_id) == agent_id]
        return runs_page(views, names, query)

    async def run_now(self, job_id: str, mode: str) -> dict[str, Any]:
        """`cron.run`: `force` (default) runs the job now; `if-enabled` only when it is enabled;
        `due` fires its due slots as the scheduler would. Raises JobNotFound."""
        job = await self.store.get_job(job_id)
        if mode == "if-enabled" and not job.enabled:
            return {"ok": True, "ran": False, "reason": "disabled"}
        if mode == "due":
            previous = self._last_fired.get(job.id)
            await self.scheduler.tick()
            latest = self._last_fired.get(job.id)
            if latest is None or latest == previous:
                return {"ok": True, "ran": False, "reason": "not-due"}
            return {"ok": True, "enqueued": True, "runId": latest}
        fired = await self.runner.fire(job, None, "manual")
        return {"ok": True, "enqueued": True, "runId": fired.run_id, "sessionKey": fired.session_key}

    async def status(self) -> dict[str, Any]:
        jobs = await self.store.jobs()
        now = self._clock()
        upcoming = [
            slot
            for job in jobs
            if job.enabled
            and (slot := job.schedule.next_after(max(now, job.origin_ms), job.origin_ms)) is not None
        ]
        return {
            "enabled": self._config.cron.enabled,
            "storage": self.store_backend(),
            "storePath": self._state.database_label(),
            "jobs": len(jobs),
            "enabledJobs": sum(job.enabled for job in jobs),
            "nextWakeAtMs": min(upcoming) if upcoming and self._config.cron.enabled else None,
            "webhooks": sorted(self.webhooks.hooks),
        }

    def store_backend(self) -> str:
        return self._state.store.database.backend

    def _check_agent(self, job: Job) -> None:
        if job.agent_id not in self._config.agent_ids:
            known = ", ".join(self._config.agent_ids)
            raise InvalidJob(f"agentId: unknown agent {job.agent_id!r} (configured agents: {known})")

    # -- events --------------------------------------------------------------------------------

    def _fired(self, job: Job, fired: Fired, trigger: Trigger) -> None:
        self._last_fired[job.id] = fired.run_id
        self._followed[fired.run_id] = job.id
        while len(self._followed) > FOLLOWED:
            self._followed.popitem(last=False)
        self._announce("started", job.id, runId=fired.run_id, trigger=trigger)

    def _on_event(self, event: SessionEvent) -> None:
        if event.run_id is None or not isinstance(event.data, AgentFinished):
            return
        job_id = self._followed.pop(event.run_id, None)
        if job_id is None:
            return
        outcome = event.data.termination_reason.outcome
        self._announce(
            "finished", job_id, runId=event.run_id, status="ok" if outcome is Outcome.OK else "error"
        )

    def _announce(self, action: str, job_id: str, **extra: Any) -> None:
        payload = {"action": action, "jobId": job_id, "ts": self._clock(), **extra}
        self._state.hub.broadcast(encode_event("cron", payload), scope="operator.read")


def _scheduler_settings(config: GatewayConfig) -> SchedulerSettings:
    return SchedulerSettings(
        missed_after_ms=int(config.cron.missed_after_s * 1000),
        max_catch_up=config.cron.max_catch_up,
    )
