"""The store's transcripts: the entries of each session, and what a model context is built from.

`Store.transcript` is a `Transcripts`; the rules of every store method are in `sessions.store`.
A session's own entries are numbered by `position` from 1; the transcript it sees also holds its
ancestors' entries up to each branch point (`sessions._store_tree` assembles it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import exc as sa_exc
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sessions import _store_rows as rows
from sessions import _store_tree as tree_queries
from sessions.db import Database
from sessions.errors import Conflict, NotFound
from sessions.ids import new_id
from sessions.records import ContextEntry, EntryRecord, NewEntry
from sessions.schema import EntryKind, entries, sessions
from sessions.session_tree import session_row

__all__ = ["PreparedEntries", "Transcripts", "append_entries"]


class Transcripts:
    """Transcript entries over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock

    async def append(self, session_id: str, items: Sequence[NewEntry]) -> list[EntryRecord]:
        """Append entries to the session's own transcript, in order, at the next positions.

        Raise NotFound for an unknown session, Conflict when a given entry id already exists.
        """
        prepared = PreparedEntries(items)
        async with self._db.write() as conn:
            return await append_entries(conn, session_id, prepared, self._clock())

    async def read(self, session_id: str) -> list[EntryRecord]:
        """Every entry the session sees, in order: inherited entries up to each branch point,
        then its own. Raise NotFound for an unknown session."""
        async with self._db.read() as conn:
            parts = await tree_queries.segments(conn, session_id)
            return await tree_queries.segment_entries(conn, parts)

    async def message_page(self, session_id: str, *, skip: int, limit: int) -> tuple[list[EntryRecord], int]:
        """A page of the session's history: of the message entries it sees (inherited ones
        included), the newest `limit` before its newest `skip`, in order; and how many message
        entries it sees. Only the page's entries are read. Raise NotFound for an unknown session."""
        async with self._db.read() as conn:
            parts = await tree_queries.segments(conn, session_id)
            return await tree_queries.message_page(conn, parts, skip=skip, limit=limit)

    async def context_entries(self, session_id: str) -> list[ContextEntry]:
        """What the session's model context is built from (`sessions.context.build_context`
        gives the same messages as for `read`), in transcript order: without a compaction on the
        session's path, every entry; with one, the newest compaction entry and the entries from
        its first kept entry on, payloads as stored JSON text. Entries before the newest
        compaction are not read, so the cost follows the context, not the transcript's length.
        Raise NotFound for an unknown session."""
        async with self._db.read() as conn:
            parts = await tree_queries.segments(conn, session_id)
            return await tree_queries.context_entries(conn, parts)

    async def own_entries(
        self, session_id: str, after_position: int = 0, limit: int | None = None
    ) -> list[EntryRecord]:
        """The session's own entries after `after_position`, in order, at most `limit`. Raise
        NotFound for an unknown session."""
        query = (
            select(entries)
            .where(entries.c.session_id == session_id, entries.c.position > after_position)
            .order_by(entries.c.position)
            .limit(limit)
        )
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
            if not found:
                await session_row(conn, session_id)
        return [rows.entry_record(row) for row in found]

    async def get_entry(self, entry_id: str) -> EntryRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(entries).where(entries.c.id == entry_id))).first()
        return None if row is None else rows.entry_record(row)

    async def count_own(self, session_id: str) -> int:
        """How many entries the session has of its own (inherited ones are not counted). Raise
        NotFound for an unknown session."""
        async with self._db.read() as conn:
            return int((await session_row(conn, session_id))._mapping["last_position"])


class PreparedEntries:
    """Entries checked and encoded before a write transaction opens (so bad input never holds
    the writer). Raise InvalidRequest for an unknown kind or a payload JSON cannot hold."""

    __slots__ = ("items", "originals")

    def __init__(self, items: Sequence[NewEntry]) -> None:
        self.items = [
            (rows.parse(EntryKind, item.kind, "entry kind"), rows.dumps(item.payload), item.id or new_id())
            for item in items
        ]
        # The records returned share the caller's payload objects (records are read-only).
        self.originals = [(kind, item.payload) for (kind, _, _), item in zip(self.items, items, strict=True)]


async def append_entries(
    conn: AsyncConnection, session_id: str, prepared: PreparedEntries, now: int
) -> list[EntryRecord]:
    """Append prepared entries inside the caller's transaction (see `Transcripts.append`)."""
    count = len(prepared.items)
    # Reserving the positions by bumping the counter row also serialises concurrent appenders
    # to one session on PostgreSQL (the row lock), so positions never collide.
    statement = (
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(last_position=sessions.c.last_position + count, updated_at=now)
        .returning(sessions.c.last_position)
    )
    last = (await conn.execute(statement)).scalar_one_or_none()
    if last is None:
        raise NotFound(f"no session {session_id}")
    if not count:
        return []
    first = last - count + 1
    new_rows = [
        {
            "id": entry_id,
            "session_id": session_id,
            "position": first + i,
            "kind": kind.value,
            "payload": payload,
            "created_at": now,
        }
        for i, (kind, payload, entry_id) in enumerate(prepared.items)
    ]
    try:
        await conn.execute(insert(entries), new_rows)
    except sa_exc.IntegrityError as error:
        raise Conflict(f"session {session_id}: an appended entry id already exists") from error
    return [
        EntryRecord(row["id"], session_id, row["position"], kind, payload, now)
        for row, (kind, payload) in zip(new_rows, prepared.originals, strict=True)
    ]
