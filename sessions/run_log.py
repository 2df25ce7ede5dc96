"""The store's run records: one row per run, from its start to how it ended.

`Store.runs` is a `RunLog`; the rules of every store method are in `sessions.store`. A run is
recorded as `running` when it starts and finishes exactly once; runs still `running` when the
daemon starts were cut off by a crash (`sessions.recovery` closes them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import insert, select, update

from sessions import _store_rows as rows
from sessions.db import Database
from sessions.errors import Conflict, InvalidRequest, InvalidTransition, NotFound
from sessions.records import RunRecord
from sessions.schema import RunStatus, runs
from sessions.session_tree import session_row
from sessions.termination import TerminationReason

__all__ = ["RunLog"]


class RunLog:
    """Run records over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock

    async def create(self, run_id: str, session_id: str) -> RunRecord:
        """Record a run of the session as started now. Raise Conflict when the run id exists,
        NotFound for an unknown session."""
        async with self._db.write() as conn:
            await session_row(conn, session_id)
            if (await conn.execute(select(runs.c.id).where(runs.c.id == run_id))).first() is not None:
                raise Conflict(f"run {run_id} already exists")
            now = self._clock()
            values = {
                "id": run_id,
                "session_id": session_id,
                "status": RunStatus.RUNNING.value,
                "started_at": now,
            }
            try:
                await conn.execute(insert(runs).values(**values))
            except sa_exc.IntegrityError as error:
                raise Conflict(f"run {run_id} already exists") from error
        return RunRecord(run_id, session_id, RunStatus.RUNNING, None, now, None, None, None)

    async def finish(
        self,
        run_id: str,
        status: RunStatus | str,
        termination_reason: TerminationReason | None,
        error: str | None = None,
        result: Any = None,
    ) -> RunRecord:
        """Record how a running run ended (`result` is any JSON value). Raise InvalidTransition
        when the run is not running (a run ends once), NotFound for an unknown run, InvalidRequest
        for the status `running`."""
        final = rows.parse(RunStatus, status, "run status")
        if final is RunStatus.RUNNING:
            raise InvalidRequest("a run cannot finish as 'running'")
        values = {
            "status": final.value,
            "termination_reason": None if termination_reason is None else str(termination_reason),
            "error": error,
            "result": None if result is None else rows.dumps(result),
        }
        async with self._db.write() as conn:
            statement = (
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == RunStatus.RUNNING.value)
                .values(ended_at=self._clock(), **values)
                .returning(*runs.c)
            )
            row = (await conn.execute(statement)).first()
            if row is None:
                current = (await conn.execute(select(runs.c.status).where(runs.c.id == run_id))).scalar()
                if current is None:
                    raise NotFound(f"no run {run_id}")
                raise InvalidTransition(f"run {run_id}", current, final.value, {RunStatus.RUNNING.value})
        return rows.run_record(row)

    async def get(self, run_id: str) -> RunRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).first()
        return None if row is None else rows.run_record(row)

    async def running(self) -> list[RunRecord]:
        """Runs still recorded as running, oldest first: after a crash, the ones cut off."""
        query = select(runs).where(runs.c.status == RunStatus.RUNNING.value).order_by(runs.c.started_at)
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
        return [rows.run_record(row) for row in found]
