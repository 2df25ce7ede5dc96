"""The store's transcripts: the entries of each session, and what a model context is built from.

`Store.transcript` is a `Transcripts`; the rules of every store method are in `sessions.store`.
A session's own entries are numbered by `position` from 1; the transcript it sees also holds its
ancestors' entries up to each branch point (`sessions._store_tree` assembles it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import select

from sessions import _context_read as context_read
from sessions import _group_commit as group_commit
from sessions import _store_rows as rows
from sessions import _store_tree as tree_queries
from sessions.db import Database
from sessions.records import ContextEntry, EntryRecord, NewEntry
from sessions.schema import entries
from sessions.session_status import session_row

__all__ = ["Transcripts"]


class Transcripts:
    """Transcript entries over the store's database. Build it through `Store`."""

    def __init__(self, database: Database, clock: Callable[[], int]) -> None:
        self._db = database
        self._clock = clock

    async def append(self, session_id: str, items: Sequence[NewEntry]) -> list[EntryRecord]:
        """Append entries to the session's own transcript, in order, at the next positions.

        Raise NotFound for an unknown session, Conflict when a given entry id already exists.
        """
        if not items:
            await self.count_own(session_id)  # NotFound for an unknown session
            return []
        commit = group_commit.GroupCommit([(session_id, items, (), None)], self._clock())
        committed = await group_commit.apply(self._db, commit)
        first = committed.first_positions[session_id]
        return [
            EntryRecord(entry.id, session_id, first + i, entry.kind, entry.payload, committed.now)
            for i, entry in enumerate(commit.shares[0].entries)
        ]

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
        Raise NotFound for an unknown session. A direct read (`sessions._context_read`)."""
        return await self._db.read_direct(lambda tx: context_read.context_entries(tx, session_id))

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
