"""The store's run records: one row per run, from its start to how it ended.

`Store.runs` is a `RunLog`; the rules of every store method are in `sessions.store`. A run is
recorded as `running` when it starts and finishes exactly once; runs still `running` when the
daemon starts were cut off by a crash (`sessions.recovery` closes them). Every run writes both, so
they are direct writes (`Database.write_direct`), not SQLAlchemy statements; `start_in` and
`finish_in` write them inside a transaction the caller holds, so that a run's start and end
commit with its events (`sessions.runs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from sessions import _store_rows as rows
from sessions._direct_write import is_unique_violation
from sessions.db import Database
from sessions.errors import Conflict, InvalidRequest, InvalidTransition, NotFound
from sessions.records import RunRecord
from sessions.schema import RunStatus, runs, sessions
from sessions.termination import TerminationReason

if TYPE_CHECKING:
    from agent_core import Usage
    from sessions._direct_write import DirectWrite

__all__ = ["RunLog"]

_START_SQL = (
    "INSERT INTO runs (id, session_id, status, started_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
_FINISH_SQL = (
    "UPDATE runs SET status = ?, termination_reason = ?, ended_at = ?, error = ?, result = ? "
    "WHERE id = ? AND status = ?"
)
_USAGE_SQL = (
    "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
    "total_tokens = total_tokens + ?, cost = cost + ?, updated_at = ? WHERE id = ?"
)


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

    async def start_in(self, tx: DirectWrite, run_id: str, session_id: str) -> bool:
        """Record a run of the session as started now, inside the caller's direct write
        transaction (the session must exist); False, with nothing written, when the run id
        exists."""
        now = self._clock()
        return await tx.execute(_START_SQL, [run_id, session_id, RunStatus.RUNNING.value, now]) == 1

    async def finish_in(
        self,
        tx: DirectWrite,
        run_id: str,
        *,
        session_id: str,
        status: RunStatus,
        termination_reason: TerminationReason,
        error: str | None,
        result: Any,
        usage: Usage,
    ) -> bool:
        """`finish` inside the caller's direct write transaction, and add the run's `usage` to its
        session's totals (`tree.add_usage`); False, with nothing written, when the run is not
        running (a run ends once). Raise InvalidRequest for a result JSON cannot hold."""
        stored = None if result is None else rows.dumps(result)
        now = self._clock()
        params = [status.value, str(termination_reason), now, error, stored, run_id, RunStatus.RUNNING.value]
        if await tx.execute(_FINISH_SQL, params) != 1:
            return False
        totals = [usage.input, usage.output, usage.total_tokens, usage.cost.total, now, session_id]
        await tx.execute(_USAGE_SQL, totals)
        return True

    async def get(self, run_id: str) -> RunRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).first()
        return None if row is None else rows.run_record(row)

    async def running(self, session_id: str | None = None) -> list[RunRecord]:
        """Runs still recorded as running (of one session, when given), oldest first: after a
        crash, the ones cut off."""
        query = select(runs).where(runs.c.status == RunStatus.RUNNING.value).order_by(runs.c.started_at)
        if session_id is not None:
            query = query.where(runs.c.session_id == session_id)
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
        return [rows.run_record(row) for row in found]

    async def usage_since(self, since_ms: int) -> list[tuple[str, int, Any]]:
        """``(agent id, started_at, result)`` of every finished run started at or after
        `since_ms`, oldest first (the result holds the run's ``usage``: tokens and cost)."""
        query = (
            select(sessions.c.agent_id, runs.c.started_at, runs.c.result)
            .join(sessions, sessions.c.id == runs.c.session_id)
            .where(runs.c.started_at >= since_ms, runs.c.ended_at.is_not(None))
            .order_by(runs.c.started_at)
        )
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
        return [(agent_id, started_at, rows.loads(result)) for agent_id, started_at, result in found]
