"""The store's run records: one row per run, from its start to how it ended.

`Store.runs` is a `RunLog`; the rules of every store method are in `sessions.store`. A run is
recorded as `running` when it starts and finishes exactly once; runs still `running` when the
daemon starts were cut off by a crash (`sessions.recovery` closes them). Every run writes both, so
they are direct writes (`Database.write_direct`), not SQLAlchemy statements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from sessions import _store_rows as rows
from sessions._direct_write import is_unique_violation
from sessions.db import Database
from sessions.errors import Conflict, InvalidRequest, InvalidTransition, NotFound
from sessions.records import RunRecord
from sessions.schema import RunStatus, runs
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
        now = self._clock()
        async with self._db.write_direct() as tx:
            if not await tx.fetch("SELECT 1 FROM sessions WHERE id = ?", [session_id]):
                raise NotFound(f"no session {session_id}")
            try:
                await tx.execute(
                    "INSERT INTO runs (id, session_id, status, started_at) VALUES (?, ?, ?, ?)",
                    [run_id, session_id, RunStatus.RUNNING.value, now],
                )
            except Exception as error:
                if is_unique_violation(error):
                    raise Conflict(f"run {run_id} already exists") from error
                raise
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
        reason = None if termination_reason is None else str(termination_reason)
        stored_result = None if result is None else rows.dumps(result)
        now = self._clock()
        async with self._db.write_direct() as tx:
            found = await tx.fetch(
                "UPDATE runs SET status = ?, termination_reason = ?, ended_at = ?, error = ?, result = ? "
                "WHERE id = ? AND status = ? RETURNING session_id, started_at",
                [final.value, reason, now, error, stored_result, run_id, RunStatus.RUNNING.value],
            )
            if not found:
                current = await tx.fetch("SELECT status FROM runs WHERE id = ?", [run_id])
                if not current:
                    raise NotFound(f"no run {run_id}")
                running = {RunStatus.RUNNING.value}
                raise InvalidTransition(f"run {run_id}", current[0][0], final.value, running)
        ((session_id, started_at),) = found
        # The record holds the result as stored (what a later `get` returns), not the caller's object.
        return RunRecord(run_id, session_id, final, reason, started_at, now, error, rows.loads(stored_result))

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
