"""The durable half of automation: jobs, the runs they fired, webhook deliveries seen.

Tables `cron_jobs`, `cron_runs` and `webhook_deliveries` (migration 0006) in the gateway's own
database, shared with the session store. Each method is one transaction, except the two claims,
which are `InputClaim`s: they run inside the transaction that records a run's input, so the slot
(or the delivery id) and the input commit together or not at all. That is what makes a slot fire
once however many schedulers share the database, across restarts too: the second writer of
`(job_id, slot)` finds the row (PostgreSQL makes it wait for the first one's commit) and its
whole transaction, input included, is rolled back.

How long rows live: jobs until removed (their runs go with them); runs, the newest `keep` per
job (and always the one holding the job's newest slot, its schedule cursor); delivery rows until
`expires_at`. `prune_runs` and `sweep_deliveries` delete the rest; the daemon calls them
periodically.

Errors are `sessions.errors` (`StoreUnavailable` when the database is busy), as for every store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog
from sqlalchemy import ColumnElement, RowMapping, and_, delete, func, insert, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.automation.delivery import parse_delivery
from gateway.automation.errors import DuplicateDelivery, InvalidJob, JobNotFound, SlotTaken
from gateway.automation.jobs import Job
from gateway.automation.run_log import RunView
from gateway.automation.schedule import parse_schedule
from sessions import InputClaim
from sessions.db import Database
from sessions.schema import channel_outbox, cron_jobs, cron_runs, inputs, runs, webhook_deliveries

__all__ = ["AutomationStore"]

log = structlog.get_logger("gateway.automation")

_VIEW_COLUMNS = (
    cron_runs.c.id,
    cron_runs.c.job_id,
    cron_runs.c.slot,
    cron_runs.c.trigger,
    cron_runs.c.session_key,
    cron_runs.c.delivery,
    cron_runs.c.delivery_error,
    cron_runs.c.fired_at,
    inputs.c.status.label("input_status"),
    inputs.c.reason.label("input_reason"),
    inputs.c.session_id,
    inputs.c.run_id.label("answer_run_id"),
    runs.c.status.label("run_status"),
    runs.c.started_at,
    runs.c.ended_at,
    runs.c.error.label("run_error"),
    runs.c.result,
)
_VIEW_FROM = cron_runs.outerjoin(inputs, inputs.c.idempotency_key == cron_runs.c.id).outerjoin(
    runs, runs.c.id == inputs.c.run_id
)


def _now_ms() -> int:
    return int(time.time() * 1000)


class AutomationStore:
    """Jobs, runs and deliveries over `database`. `clock` is Unix milliseconds (a seam)."""

    def __init__(self, database: Database, *, clock: Callable[[], int] = _now_ms) -> None:
        self._db = database
        self._clock = clock

    # -- jobs --------------------------------------------------------------------------------

    async def add_job(self, job: Job) -> None:
        async with self._db.write() as conn:
            await conn.execute(insert(cron_jobs).values(**_job_values(job)))

    async def save_job(self, job: Job) -> None:
        """Store a changed job. Raises JobNotFound when it was removed meanwhile."""
        values = _job_values(job)
        del values["id"]
        async with self._db.write() as conn:
            result = await conn.execute(update(cron_jobs).where(cron_jobs.c.id == job.id).values(**values))
            if result.rowcount == 0:
                raise JobNotFound(job.id)

    async def get_job(self, job_id: str) -> Job:
        """Raises JobNotFound."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(cron_jobs).where(cron_jobs.c.id == job_id))).first()
        if row is None:
            raise JobNotFound(job_id)
        job = _job(row._mapping)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def jobs(self) -> list[Job]:
        """Every job, oldest first. A stored job this version cannot read is logged and left out."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(select(cron_jobs).order_by(cron_jobs.c.created_at, cron_jobs.c.id))
            ).all()
        return [job for job in (_job(row._mapping) for row in rows) if job is not None]

    async def remove_job(self, job_id: str) -> bool:
        """Delete the job and its runs; False when there was no such job."""
        async with self._db.write() as conn:
            removed = await conn.execute(delete(cron_jobs).where(cron_jobs.c.id == job_id))
            await conn.execute(delete(cron_runs).where(cron_runs.c.job_id == job_id))
        return bool(removed.rowcount)

    # -- runs --------------------------------------------------------------------------------

    def run_claim(
        self,
        *,
        job_id: str,
        run_id: str,
        slot_ms: int | None,
        trigger: str,
        session_key: str,
        delivery: Mapping[str, Any] | None = None,
        delivery_error: str | None = None,
    ) -> InputClaim:
        """Records the run with its input. For a scheduled run (`slot_ms` set) it raises
        SlotTaken, aborting the input's transaction, when the slot has a run already."""
        values = {
            "id": run_id,
            "job_id": job_id,
            "slot": slot_ms,
            "trigger": trigger,
            "session_key": session_key,
            "delivery": None if delivery is None else _dumps(delivery),
            "delivery_error": delivery_error,
        }

        async def claim(conn: AsyncConnection) -> None:
            statement = self._db.insert(cron_runs).values(fired_at=self._clock(), **values)
            if slot_ms is None:
                await conn.execute(statement)
                return
            result = await conn.execute(statement.on_conflict_do_nothing(index_elements=["job_id", "slot"]))
            if result.rowcount != 1:
                raise SlotTaken(job_id, slot_ms)

        return claim

    async def cursors(self) -> dict[str, int]:
        """Per job with scheduled runs: its newest slot that fired."""
        query = (
            select(cron_runs.c.job_id, func.max(cron_runs.c.slot))
            .where(cron_runs.c.slot.is_not(None))
            .group_by(cron_runs.c.job_id)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return {str(job_id): int(slot) for job_id, slot in rows if slot is not None}

    async def run_views(
        self, *, job_id: str | None = None, run_id: str | None = None, limit: int = 1000
    ) -> list[RunView]:
        """Runs, newest first: of one job, or one run, or of every job."""
        where: list[ColumnElement[bool]] = []
        if job_id is not None:
            where.append(cron_runs.c.job_id == job_id)
        if run_id is not None:
            where.append(cron_runs.c.id == run_id)
        order = (cron_runs.c.fired_at.desc(), cron_runs.c.slot.desc(), cron_runs.c.id.desc())
        query = select(*_VIEW_COLUMNS).select_from(_VIEW_FROM).where(*where).order_by(*order).limit(limit)
        async with self._db.read() as conn:
            rows = [row._mapping for row in (await conn.execute(query)).all()]
            states = await _outbox_states(conn, rows)
        return [_view(row, states) for row in rows]

    async def latest_runs(self) -> dict[str, RunView]:
        """Per job: its newest run."""
        newest = (
            select(cron_runs.c.job_id, func.max(cron_runs.c.fired_at).label("fired_at"))
            .group_by(cron_runs.c.job_id)
            .subquery()
        )
        query = (
            select(*_VIEW_COLUMNS)
            .select_from(
                _VIEW_FROM.join(
                    newest,
                    and_(newest.c.job_id == cron_runs.c.job_id, newest.c.fired_at == cron_runs.c.fired_at),
                )
            )
            .order_by(cron_runs.c.slot, cron_runs.c.id)
        )
        async with self._db.read() as conn:
            rows = [row._mapping for row in (await conn.execute(query)).all()]
            states = await _outbox_states(conn, rows)
        out: dict[str, RunView] = {}
        for row in rows:  # same instant: the last slot wins
            out[str(row["job_id"])] = _view(row, states)
        return out

    async def prune_runs(self, keep: int) -> int:
        """Keep the newest `keep` runs of each job (and the one holding its newest slot)."""
        removed = 0
        async with self._db.write() as conn:
            job_ids = (await conn.execute(select(cron_runs.c.job_id).distinct())).scalars().all()
            for job_id in job_ids:
                cutoff = (
                    await conn.execute(
                        select(cron_runs.c.fired_at)
                        .where(cron_runs.c.job_id == job_id)
                        .order_by(cron_runs.c.fired_at.desc())
                        .offset(keep - 1)
                        .limit(1)
                    )
                ).scalar()
                if cutoff is None:
                    continue
                top = (
                    await conn.execute(select(func.max(cron_runs.c.slot)).where(cron_runs.c.job_id == job_id))
                ).scalar()
                keep_slot = (
                    or_(cron_runs.c.slot.is_(None), cron_runs.c.slot < top) if top is not None else true()
                )
                result = await conn.execute(
                    delete(cron_runs).where(
                        cron_runs.c.job_id == job_id, cron_runs.c.fired_at < cutoff, keep_slot
                    )
                )
                removed += result.rowcount
        return removed

    # -- webhook deliveries ------------------------------------------------------------------

    def delivery_claim(self, hook: str, keys: Sequence[tuple[str, int]], run_id: str) -> InputClaim:
        """Records a webhook delivery with its input: one row per `(key, expires_at)`. Raises
        DuplicateDelivery, aborting the input's transaction, when any key was seen before."""

        async def claim(conn: AsyncConnection) -> None:
            now = self._clock()
            names = [key for key, _ in keys]
            await conn.execute(
                delete(webhook_deliveries).where(
                    webhook_deliveries.c.hook == hook,
                    webhook_deliveries.c.key.in_(names),
                    webhook_deliveries.c.expires_at <= now,
                )
            )
            for key, expires_at in keys:
                statement = (
                    self._db.insert(webhook_deliveries)
                    .values(hook=hook, key=key, run_id=run_id, received_at=now, expires_at=expires_at)
                    .on_conflict_do_nothing(index_elements=["hook", "key"])
                )
                if (await conn.execute(statement)).rowcount != 1:
                    raise DuplicateDelivery(hook, None)

        return claim

    async def delivery_run(self, hook: str, keys: Iterable[str]) -> str | None:
        """The run a delivery seen before started (by any of its keys)."""
        query = select(webhook_deliveries.c.run_id).where(
            webhook_deliveries.c.hook == hook, webhook_deliveries.c.key.in_(list(keys))
        )
        async with self._db.read() as conn:
            return (await conn.execute(query.limit(1))).scalar()

    async def sweep_deliveries(self) -> int:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(webhook_deliveries).where(webhook_deliveries.c.expires_at <= self._clock())
            )
        return int(result.rowcount)


def _job_values(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "display_name": job.display_name,
        "description": job.description,
        "agent_id": job.agent_id,
        "session_key": job.session_key,
        "session_target": job.session_target,
        "wake_mode": job.wake_mode,
        "schedule": _dumps(job.schedule.wire()),
        "payload": _dumps(job.payload),
        "delivery": None if job.delivery is None else _dumps(job.delivery.wire()),
        "catch_up": job.catch_up,
        "enabled": job.enabled,
        "delete_after_run": job.delete_after_run,
        "origin_at": job.origin_ms,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


def _job(row: RowMapping) -> Job | None:
    try:
        return Job(
            id=str(row["id"]),
            name=str(row["name"]),
            display_name=row["display_name"],
            description=row["description"],
            agent_id=str(row["agent_id"]),
            session_key=row["session_key"],
            session_target=str(row["session_target"]),
            wake_mode=str(row["wake_mode"]),
            schedule=parse_schedule(json.loads(row["schedule"])),
            payload=dict(json.loads(row["payload"])),
            delivery=parse_delivery(None if row["delivery"] is None else json.loads(row["delivery"])),
            catch_up=row["catch_up"],
            enabled=bool(row["enabled"]),
            delete_after_run=bool(row["delete_after_run"]),
            origin_ms=int(row["origin_at"]),
            created_at=int(row["created_at"]),
            updated_at=int(row["updated_at"]),
        )
    except (InvalidJob, ValueError) as exc:
        log.error("a stored cron job cannot be read; it does not run", job_id=row["id"], error=str(exc))
        return None


async def _outbox_states(conn: AsyncConnection, rows: list[RowMapping]) -> dict[str, list[str]]:
    """The outbox states of the runs that answered rows asking for a delivery."""
    wanted = {
        str(row["answer_run_id"]) for row in rows if row["delivery"] is not None and row["answer_run_id"]
    }
    if not wanted:
        return {}
    query = select(channel_outbox.c.run_id, channel_outbox.c.state).where(channel_outbox.c.run_id.in_(wanted))
    states: dict[str, list[str]] = {}
    for run_id, state in (await conn.execute(query)).all():
        states.setdefault(str(run_id), []).append(str(state))
    return states


def _view(row: RowMapping, states: Mapping[str, list[str]]) -> RunView:
    result = json.loads(row["result"]) if row["result"] else {}
    answer = row["answer_run_id"]
    return RunView(
        id=str(row["id"]),
        job_id=str(row["job_id"]),
        slot_ms=row["slot"],
        trigger=str(row["trigger"]),
        session_key=str(row["session_key"]),
        fired_at=int(row["fired_at"]),
        delivery=json.loads(row["delivery"]) if row["delivery"] else None,
        delivery_error=row["delivery_error"],
        input_status=row["input_status"],
        input_reason=row["input_reason"],
        session_id=row["session_id"],
        answer_run_id=answer,
        run_status=row["run_status"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        run_error=row["run_error"],
        result=result if isinstance(result, dict) else {},
        outbox_states=tuple(states.get(str(answer), ())) if answer else (),
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
