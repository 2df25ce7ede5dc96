"""The store's durable event log: each session's numbered events, their pruning and replay point.

`Store.events` is an `EventLog`; the rules of every store method are in `sessions.store`. Seqs are
per session, start at 1 and never repeat: an append must continue the log exactly
(`last_seq + 1, + 2, ...`), checked by compare-and-set on the session's `last_seq`, so two writers
can never both continue from the same seq. Pruning removes droppable events and leaves holes;
`first_seq_after_prune` says from where a reader can replay exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from sqlalchemy import and_, case, delete, func, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sessions import _store_rows as rows
from sessions.db import Database
from sessions.errors import SeqConflict
from sessions.records import EventRecord, NewEvent
from sessions.schema import events, sessions
from sessions.session_tree import session_row

__all__ = ["EventLog", "append_events", "encode_events"]


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
        payloads = encode_events(session_id, items)
        async with self._db.write() as conn:
            return await append_events(conn, session_id, items, payloads, self._clock())

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


def encode_events(session_id: str, items: Sequence[NewEvent]) -> list[str]:
    """The events' payloads as stored text, before a write transaction opens. Raise SeqConflict
    unless the seqs increase by one, InvalidRequest for a payload JSON cannot hold."""
    first = items[0].seq if items else 0
    for offset, item in enumerate(items):
        if item.seq != first + offset:
            raise SeqConflict(session_id, first + offset, item.seq)
    return [rows.dumps(item.payload) for item in items]


async def append_events(
    conn: AsyncConnection,
    session_id: str,
    items: Sequence[NewEvent],
    payloads: Sequence[str],
    now: int,
) -> list[EventRecord]:
    """Append encoded events inside the caller's transaction (see `EventLog.append`)."""
    if not items:
        return []
    first = items[0].seq
    # Compare-and-set on last_seq: two writers can never both continue from the same seq.
    moved = await conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.last_seq == first - 1)
        .values(last_seq=items[-1].seq)
    )
    if moved.rowcount == 0:
        current = int((await session_row(conn, session_id))._mapping["last_seq"])
        raise SeqConflict(session_id, current + 1, first)
    new_rows = [
        {
            "session_id": session_id,
            "seq": item.seq,
            "run_id": item.run_id,
            "type": item.type,
            "payload": payload,
            "created_at": now,
        }
        for item, payload in zip(items, payloads, strict=True)
    ]
    await conn.execute(insert(events), new_rows)
    return [EventRecord(session_id, item.seq, item.run_id, item.type, item.payload, now) for item in items]
