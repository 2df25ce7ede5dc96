"""The store's durable event log: each session's numbered events, their pruning and replay point.

`Store.events` is an `EventLog`; the rules of every store method are in `sessions.store`. Seqs are
per session, start at 1 and never repeat: an append must continue the log exactly
(`last_seq + 1, + 2, ...`), checked by compare-and-set on the session's `last_seq`, so two writers
can never both continue from the same seq. Pruning removes droppable events and leaves holes;
`first_seq_after_prune` says from where a reader can replay exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from sqlalchemy import and_, case, delete, func, literal, select, update

from sessions import _group_commit as group_commit
from sessions import _store_rows as rows
from sessions.db import Database
from sessions.records import EventRecord, NewEvent
from sessions.schema import events, sessions
from sessions.session_status import session_row

__all__ = ["EventLog"]


class EventLog:
    """Session events over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock

    async def append(self, session_id: str, items: Sequence[NewEvent]) -> list[EventRecord]:
        """Append events that continue the session's log: seqs last_seq + 1, + 2, ... exactly;
        the session's `last_seq` moves in the same transaction.

        Raise SeqConflict (and store nothing) when the seqs do not continue the log, NotFound for
        an unknown session.
        """
        if not items:
            await self.last_seq(session_id)  # NotFound for an unknown session
            return []
        commit = group_commit.GroupCommit([(session_id, (), items, None)], self._clock())
        now = (await group_commit.apply(self._db, commit)).now
        return [EventRecord(session_id, e.seq, e.run_id, e.type, e.payload, now) for e in items]

    async def read(self, session_id: str, after_seq: int = 0, limit: int = 1000) -> list[EventRecord]:
        """Stored events with seq > `after_seq`, in order, at most `limit`. Pruning leaves holes;
        see `first_seq_after_prune`."""
        query = (
            select(events)
            .where(events.c.session_id == session_id, events.c.seq > after_seq)
            .order_by(events.c.seq)
            .limit(limit)
        )
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
        return [rows.event_record(row) for row in found]

    async def last_seq(self, session_id: str) -> int:
        """The seq of the session's last event (0 before the first). Raise NotFound for an
        unknown session."""
        async with self._db.read() as conn:
            return int((await session_row(conn, session_id))._mapping["last_seq"])

    async def prune(self, session_id: str, *, before_seq: int, types: Collection[str]) -> int:
        """Delete the session's events of the given `types` with seq < `before_seq`; return how
        many went. Readers then meet holes; `first_seq_after_prune` says where exact replay
        starts. Raise NotFound for an unknown session."""
        condition = and_(
            events.c.session_id == session_id, events.c.seq < before_seq, events.c.type.in_(list(types))
        )
        async with self._db.write() as conn:
            await session_row(conn, session_id)
            highest = (await conn.execute(select(func.max(events.c.seq)).where(condition))).scalar_one()
            if highest is None:
                return 0
            removed = (await conn.execute(delete(events).where(condition))).rowcount
            raised = case((sessions.c.pruned_seq < highest, literal(highest)), else_=sessions.c.pruned_seq)
            await conn.execute(update(sessions).where(sessions.c.id == session_id).values(pruned_seq=raised))
            return int(removed)

    async def pruned_seq(self, session_id: str) -> int:
        """The highest seq pruning has removed from the session's log (0 when none)."""
        async with self._db.read() as conn:
            return int((await session_row(conn, session_id))._mapping["pruned_seq"])

    async def first_seq_after_prune(self, session_id: str) -> int:
        """The lowest seq from which the log is complete: every event at or above it is stored.

        A reader that has everything up to `after_seq` can replay exactly when
        `after_seq + 1 >= first_seq_after_prune(...)`; otherwise it needs a snapshot.
        """
        return await self.pruned_seq(session_id) + 1
