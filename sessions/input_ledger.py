"""The store's input ledger: every accepted inbound message, keyed by its idempotency key.

`Store.inputs` is an `InputLedger`; the rules of every store method are in `sessions.store`. An
input is recorded before its sender is answered and moves on until it reaches one of the
`FINAL_INPUT_STATUSES`, its recorded outcome, which never changes again. Inputs in
`WAITING_INPUT_STATUSES` were accepted and have not reached a run yet: after a restart they run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Final

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sessions import _store_rows as rows
from sessions.db import Database
from sessions.errors import InvalidTransition, NotFound, StoreError
from sessions.ids import new_id
from sessions.records import InputRecord, JSONObject
from sessions.schema import InputStatus, inputs
from sessions.session_tree import session_row

__all__ = ["FINAL_INPUT_STATUSES", "WAITING_INPUT_STATUSES", "InputLedger"]

FINAL_INPUT_STATUSES: Final = frozenset({InputStatus.DONE, InputStatus.REJECTED, InputStatus.INTERRUPTED})
"""An input in one of these has its outcome recorded."""
WAITING_INPUT_STATUSES: Final = frozenset({InputStatus.QUEUED, InputStatus.STEERED, InputStatus.FOLLOWUP})
"""Accepted, and not part of a running run yet."""


class InputLedger:
    """Accepted inputs over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock

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
    ) -> tuple[InputRecord, bool]:
        """Record an accepted input once: `(record, True)` when the key is new, `(the stored
        record, False)` when it was seen before, also by a concurrent call (the other arguments
        are then ignored). Raise NotFound for an unknown session."""
        values = {
            "idempotency_key": idempotency_key,
            "session_id": session_id,
            "run_id": run_id,
            "source": None if source is None else rows.dumps(source),
            "payload": rows.dumps(payload),
            "queue_mode": queue_mode,
            "status": rows.parse(InputStatus, status, "input status").value,
            "reason": None,
        }
        async with self._db.write() as conn:
            existing = await _input_row(conn, idempotency_key)
            if existing is not None:
                return rows.input_record(existing), False
            await session_row(conn, session_id)
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
        values: dict[str, Any] = {"status": state.value, "reason": reason}
        if run_id is not None:
            values["run_id"] = run_id
        open_states = [s.value for s in InputStatus if s not in FINAL_INPUT_STATUSES]
        async with self._db.write() as conn:
            statement = (
                update(inputs)
                .where(inputs.c.idempotency_key == idempotency_key, inputs.c.status.in_(open_states))
                .values(updated_at=self._clock(), **values)
                .returning(*inputs.c)
            )
            row = (await conn.execute(statement)).first()
            if row is None:
                current = await _input_row(conn, idempotency_key)
                if current is None:
                    raise NotFound(f"no input {idempotency_key!r}")
                what = f"input {idempotency_key!r}"
                raise InvalidTransition(what, current._mapping["status"], state.value, open_states)
        return rows.input_record(row)

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


async def _input_row(conn: AsyncConnection, key: str) -> rows.AnyRow | None:
    return (await conn.execute(select(inputs).where(inputs.c.idempotency_key == key))).first()
