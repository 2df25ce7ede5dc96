"""The store's input ledger: every accepted inbound message, keyed by its idempotency key.

`Store.inputs` is an `InputLedger`; the rules of every store method are in `sessions.store`. An
input is recorded before its sender is answered and moves on until it reaches one of the
`FINAL_INPUT_STATUSES`, its recorded outcome, which never changes again. Inputs in
`WAITING_INPUT_STATUSES` were accepted and have not reached a run yet: after a restart they run.

Every input is recorded once and moved at least twice (running, then its outcome), so those writes
are direct writes (`Database.write_direct`); `record_in` and `move_in` run inside a transaction
the caller holds, so that a run's start and end commit with its events (`sessions.runs`).
Concurrent `record` calls without a claim share one transaction (`sessions._input_batches`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Final

from sqlalchemy import select

from sessions import _store_rows as rows
from sessions._input_batches import InputBatches, Request
from sessions.db import Database
from sessions.errors import InvalidTransition, NotFound, StoreError
from sessions.ids import new_id
from sessions.records import InputRecord, JSONObject
from sessions.schema import InputStatus, inputs
from sessions.session_status import session_row

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from sessions._direct_write import DirectWrite

__all__ = ["FINAL_INPUT_STATUSES", "WAITING_INPUT_STATUSES", "InputClaim", "InputLedger"]

InputClaim = Callable[["AsyncConnection"], Awaitable[None]]
"""Writes that must commit with an input or not at all (a scheduled slot, a webhook delivery id):
run inside the transaction that records a new input, before its row is written. Raising aborts
the transaction (nothing is recorded) and the exception reaches the caller of `record`."""

FINAL_INPUT_STATUSES: Final = frozenset({InputStatus.DONE, InputStatus.REJECTED, InputStatus.INTERRUPTED})
"""An input in one of these has its outcome recorded."""
WAITING_INPUT_STATUSES: Final = frozenset({InputStatus.QUEUED, InputStatus.STEERED, InputStatus.FOLLOWUP})
"""Accepted, and not part of a running run yet."""
_OPEN_STATES: Final = [s.value for s in InputStatus if s not in FINAL_INPUT_STATUSES]
_COLUMNS: Final = [column.name for column in inputs.c]
_SELECT_SQL: Final = f"SELECT {', '.join(_COLUMNS)} FROM inputs WHERE idempotency_key = ?"
_INSERT_SQL: Final = (
    f"INSERT INTO inputs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
    "ON CONFLICT (idempotency_key) DO NOTHING"
)
_OPEN_SQL: Final = f"status IN ({', '.join('?' * len(_OPEN_STATES))})"


class InputLedger:
    """Accepted inputs over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock
        self._batches: InputBatches[dict[str, object]] = InputBatches(self._record_group)

    async def record(
        self,
        idempotency_key: str,
        *,
        session_id: str,
        payload: JSONObject,
        source: JSONObject | None = None,
        queue_mode: str | None = None,
        status: InputStatus | str = InputStatus.QUEUED,
        run_id: str | None = None,
        claim: InputClaim | None = None,
    ) -> tuple[InputRecord, bool]:
        """Record an accepted input once: `(record, True)` when the key is new, `(the stored
        record, False)` when it was seen before, also by a concurrent call (the other arguments
        are then ignored). `claim` runs in the same transaction when the key is new (see
        `InputClaim`). Raise NotFound for an unknown session."""
        values = _values(idempotency_key, session_id, payload, source, queue_mode, status, run_id)
        if claim is None:
            recorded: tuple[InputRecord, bool] | None = await self._batches.submit(values)
            if recorded is None:
                raise NotFound(f"no session {session_id}")
            return recorded
        async with self._db.write() as conn:
            existing = await _input_row(conn, idempotency_key)
            if existing is not None:
                return rows.input_record(existing), False
            await session_row(conn, session_id)
            if claim is not None:
                await claim(conn)
            now = self._clock()
            statement = (
                self._db.insert(inputs)
                .values(seq=new_id(), created_at=now, updated_at=now, **values)
                .on_conflict_do_nothing(index_elements=["idempotency_key"])
            )
            # A concurrent writer (PostgreSQL) may win between the check and the insert: the
            # conflict clause waits for it and inserts nothing, and we return its row.
            created = (await conn.execute(statement)).rowcount == 1
            row = await _input_row(conn, idempotency_key)
            if row is None:
                raise StoreError(f"input {idempotency_key!r} vanished while being recorded")
            return rows.input_record(row), created

    async def record_in(
        self,
        tx: DirectWrite,
        idempotency_key: str,
        *,
        session_id: str,
        payload: JSONObject,
        source: JSONObject | None = None,
        queue_mode: str | None = None,
        status: InputStatus | str = InputStatus.QUEUED,
        run_id: str | None = None,
    ) -> tuple[InputRecord, bool] | None:
        """`record` inside the caller's direct write transaction (without a claim); None, with
        nothing written, for an unknown session. Raise InvalidRequest for a payload or source
        JSON cannot hold or an unknown status, before anything is written."""
        values = _values(idempotency_key, session_id, payload, source, queue_mode, status, run_id)
        return await self._record_values(tx, values)

    async def _record_group(self, group: list[Request[dict[str, object]]]) -> None:
        """Record a group of new inputs (`_values`) in one transaction (`InputBatches`)."""
        async with self._db.write_direct() as tx:
            outcomes = [await self._record_values(tx, dict(request.work)) for request in group]
        for request, outcome in zip(group, outcomes, strict=True):
            if not request.future.done():
                request.future.set_result(outcome)

    async def _record_values(
        self, tx: DirectWrite, values: dict[str, object]
    ) -> tuple[InputRecord, bool] | None:
        """`record_in` of checked and encoded columns (`_values`)."""
        idempotency_key = values["idempotency_key"]
        found = await tx.fetch(_SELECT_SQL, [idempotency_key])
        if not found:
            if not await tx.fetch("SELECT 1 FROM sessions WHERE id = ?", [values["session_id"]]):
                return None
            now = self._clock()
            values.update(seq=new_id(), created_at=now, updated_at=now)
            row = [values[name] for name in _COLUMNS]
            # A concurrent writer (PostgreSQL) may have recorded the key since the check: the
            # conflict clause inserts nothing then, and its row is read below.
            if await tx.execute(_INSERT_SQL, row) == 1:
                return rows.input_record(values), True
            found = await tx.fetch(_SELECT_SQL, [idempotency_key])
            if not found:
                raise StoreError(f"input {idempotency_key!r} vanished while being recorded")
        return rows.input_record(dict(zip(_COLUMNS, found[0], strict=True))), False

    async def move_in(
        self,
        tx: DirectWrite,
        keys: list[str],
        *,
        status: InputStatus,
        run_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        """`update` of every input in `keys` inside the caller's direct write transaction, in
        one statement; inputs whose outcome is recorded, and unknown keys, are left as they are."""
        if not keys:
            return
        condition, params = tx.in_list("idempotency_key", keys)
        set_run = "" if run_id is None else "run_id = ?, "
        run_ids = [] if run_id is None else [run_id]
        await tx.execute(
            f"UPDATE inputs SET status = ?, reason = ?, {set_run}updated_at = ? "
            f"WHERE {condition} AND {_OPEN_SQL}",
            [status.value, reason, *run_ids, self._clock(), *params, *_OPEN_STATES],
        )

    async def get(self, idempotency_key: str) -> InputRecord | None:
        async with self._db.read() as conn:
            row = await _input_row(conn, idempotency_key)
        return None if row is None else rows.input_record(row)

    async def update(
        self,
        idempotency_key: str,
        *,
        status: InputStatus | str,
        reason: str | None = None,
        run_id: str | None = None,
    ) -> InputRecord:
        """Move an input on; `run_id` None keeps the stored one. Raise InvalidTransition once its
        outcome (one of `FINAL_INPUT_STATUSES`) is recorded, NotFound for an unknown key."""
        state = rows.parse(InputStatus, status, "input status")
        # Every run moves its inputs twice: a direct write (`Database.write_direct`).
        run_ids = [] if run_id is None else [run_id]
        set_run = "" if run_id is None else "run_id = ?, "
        columns = ", ".join(column.name for column in inputs.c)
        async with self._db.write_direct() as tx:
            found = await tx.fetch(
                f"UPDATE inputs SET status = ?, reason = ?, {set_run}updated_at = ? "
                f"WHERE idempotency_key = ? AND status IN ({', '.join('?' * len(_OPEN_STATES))}) "
                f"RETURNING {columns}",
                [state.value, reason, *run_ids, self._clock(), idempotency_key, *_OPEN_STATES],
            )
            if not found:
                query = "SELECT status FROM inputs WHERE idempotency_key = ?"
                current = await tx.fetch(query, [idempotency_key])
                if not current:
                    raise NotFound(f"no input {idempotency_key!r}")
                what = f"input {idempotency_key!r}"
                raise InvalidTransition(what, current[0][0], state.value, _OPEN_STATES)
        return rows.input_record(dict(zip(inputs.c.keys(), found[0], strict=True)))

    async def with_status(
        self, statuses: Collection[InputStatus | str], session_id: str | None = None
    ) -> list[InputRecord]:
        """Inputs in any of `statuses` (of one session, when given), in arrival order."""
        wanted = [rows.parse(InputStatus, s, "input status").value for s in statuses]
        query = select(inputs).where(inputs.c.status.in_(wanted)).order_by(inputs.c.seq)
        if session_id is not None:
            query = query.where(inputs.c.session_id == session_id)
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
        return [rows.input_record(row) for row in found]

    async def sources(self, session_id: str, limit: int = 50) -> list[JSONObject]:
        """The `source` of the session's newest inputs that have one, newest first (at most
        `limit` inputs are read)."""
        query = (
            select(inputs.c.source)
            .where(inputs.c.session_id == session_id, inputs.c.source.is_not(None))
            .order_by(inputs.c.seq.desc())
            .limit(limit)
        )
        async with self._db.read() as conn:
            found = (await conn.execute(query)).scalars().all()
        return [source for source in map(rows.loads, found) if isinstance(source, dict)]


def _values(  # noqa: PLR0917 (the columns, in their order)
    key: str,
    session_id: str,
    payload: JSONObject,
    source: JSONObject | None,
    queue_mode: str | None,
    status: InputStatus | str,
    run_id: str | None,
) -> dict[str, object]:
    """The columns of a new input but `seq` and the times, checked and encoded."""
    return {
        "idempotency_key": key,
        "session_id": session_id,
        "run_id": run_id,
        "source": None if source is None else rows.dumps(source),
        "payload": rows.dumps(payload),
        "queue_mode": queue_mode,
        "status": rows.parse(InputStatus, status, "input status").value,
        "reason": None,
    }


async def _input_row(conn: AsyncConnection, key: str) -> rows.AnyRow | None:
    return (await conn.execute(select(inputs).where(inputs.c.idempotency_key == key))).first()
