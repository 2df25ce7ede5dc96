"""One firing of a job: its run id, its session, its delivery, and the claim of its slot.

Run ids are deterministic for scheduled runs, `cron:<jobId>:<slotMs>`, so every scheduler that
computes the same slot names the same run: the input ledger's key and the `(job, slot)` row of
`cron_runs` both refuse the second. Runs started by hand are `cron:<jobId>:manual:<uuid>`. An
isolated job's run gets a new session, `cron:<jobId>:run:<slotMs or uuid>`.

A delivery that names no running binding does not stop the run: the reply stays in the session
and the run records why it was not delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import msgspec
import structlog

from gateway.automation.errors import SlotTaken
from gateway.automation.jobs import Job
from gateway.automation.launcher import Launcher, RunRequest
from gateway.automation.store import AutomationStore
from sessions.ids import new_id

__all__ = ["Fired", "JobRunner", "Trigger"]

log = structlog.get_logger("gateway.automation")

Trigger = Literal["schedule", "catch-up", "manual"]


class Fired(msgspec.Struct, frozen=True):
    run_id: str
    session_key: str
    started: bool
    """False when the slot had fired already (here or on another node)."""


class JobRunner:
    def __init__(
        self,
        store: AutomationStore,
        launcher: Launcher,
        *,
        on_fired: Callable[[Job, Fired, Trigger], None] | None = None,
    ) -> None:
        self._store = store
        self._launcher = launcher
        self._on_fired = on_fired

    async def fire(self, job: Job, slot_ms: int | None, trigger: Trigger) -> Fired:
        """Start the job's run for `slot_ms` (None: a run by hand). Raises `sessions.errors`
        (StoreUnavailable or LaneFull when the slot should be tried again)."""
        suffix = str(slot_ms) if slot_ms is not None else f"manual:{new_id()}"
        run_id = f"cron:{job.id}:{suffix}"
        session_key = job.session_key_for(suffix.replace("manual:", ""))
        reply = None
        delivery_error = None
        delivery = None
        if job.delivery is not None:
            replies = self._launcher.replies
            try:
                reply = job.delivery.resolve(replies.running() if replies is not None else [])
            except LookupError as exc:
                delivery_error = str(exc)
                log.warning("a cron job's reply cannot be delivered", job_id=job.id, reason=delivery_error)
            else:
                delivery = {"binding": reply[0], "route": reply[1].as_dict()}
        claim = self._store.run_claim(
            job_id=job.id,
            run_id=run_id,
            slot_ms=slot_ms,
            trigger=trigger,
            session_key=session_key,
            delivery=delivery,
            delivery_error=delivery_error,
        )
        request = RunRequest(
            run_id=run_id,
            agent_id=job.agent_id,
            session_key=session_key,
            message=job.message,
            claim=claim,
            source={"automation": "cron", "jobId": job.id, "trigger": trigger},
            reply=reply,
        )
        try:
            result = await self._launcher.launch(request)
        except SlotTaken:
            return Fired(run_id, session_key, started=False)
        fired = Fired(run_id, session_key, started=result.status == "started")
        if fired.started and self._on_fired is not None:
            self._on_fired(job, fired, trigger)
        return fired
