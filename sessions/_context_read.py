"""Reading what a run's model context is built from, on the driver itself (private to the store).

`Store.transcript.context_entries` is read for every run whose context is not cached (the first
run of a session after a start or an eviction, and the compactor's reads). It used to go through
SQLAlchemy's async engine: a hand-off to the SQLite driver's thread per statement, then a `Row`
object per entry and an attribute lookup per column on the event loop's thread, about two thirds
of the read for a long context. It is now a direct read (`Database.read_direct`): plain SQL,
rows as tuples, each made a `ContextEntry` in C (`ContextEntry._make`).

What is read is what `sessions.context.view_of` needs (see `sessions._store_tree` for the
segments of a transcript): without a compaction on the session's path, every entry; with one,
the newest compaction entry and the entries from its first kept entry on (or from the
compaction entry itself when the first kept entry is not before it). The newest compaction is
found by walking each segment's entries backwards from the end (the `(session_id, position)`
index), so nothing before it is read.

Statements: the ancestor chain (one recursive query), the newest compaction (one per segment
from the last, until one is found), its first kept entry (one point read), then one query per
segment from the context's start. The SQL is valid on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sessions._direct_write import DirectWrite
from sessions._store_tree import CHAIN_SQL, Segment, Start, visible_segments
from sessions.errors import NotFound
from sessions.records import ContextEntry
from sessions.schema import EntryKind

__all__ = ["context_entries"]

_COMPACTION_KIND = EntryKind.COMPACTION.value
_ENTRY_AT_SQL = "SELECT session_id, position FROM entries WHERE id = ?"


async def context_entries(tx: DirectWrite, session_id: str) -> list[ContextEntry]:
    """The entries a context of `session_id` is built from, in transcript order (payloads as
    stored JSON text). Raise NotFound for an unknown session."""
    chain = await tx.fetch(CHAIN_SQL, [session_id])
    if not chain:
        raise NotFound(f"no session {session_id}")
    parts = visible_segments(chain)
    first_level, first_position = await _context_start(tx, parts) or (0, None)
    found: list[ContextEntry] = []
    for level in range(first_level, len(parts)):
        sid, limit = parts[level]
        sql = "SELECT id, kind, payload FROM entries WHERE session_id = ?"
        params: list[Any] = [sid]
        if limit is not None:
            sql += " AND position <= ?"
            params.append(limit)
        if level == first_level and first_position is not None:
            sql += " AND position >= ?"
            params.append(first_position)
        found.extend(map(ContextEntry._make, await tx.fetch(sql + " ORDER BY position", params)))
    return found


async def _context_start(tx: DirectWrite, parts: Sequence[Segment]) -> Start | None:
    """Where the context begins: (segment index, first position read); None for the beginning
    of the transcript."""
    newest = await _newest_compaction(tx, parts)
    if newest is None:
        return None
    level, position, payload = newest
    first_kept = _first_kept_id(payload)
    if first_kept is not None:
        where = await tx.fetch(_ENTRY_AT_SQL, [first_kept])
        if where:
            owner, kept_position = where[0]
            for index in range(level + 1):
                sid, limit = parts[index]
                if sid != owner or (limit is not None and kept_position > limit):
                    continue
                if index < level or kept_position < position:
                    return index, int(kept_position)
    return level, position


async def _newest_compaction(tx: DirectWrite, parts: Sequence[Segment]) -> tuple[int, int, str] | None:
    """(segment index, position, payload text) of the last compaction entry of the transcript,
    each segment searched from its end."""
    for level in range(len(parts) - 1, -1, -1):
        sid, limit = parts[level]
        sql = "SELECT position, payload FROM entries WHERE session_id = ? AND kind = ?"
        params: list[Any] = [sid, _COMPACTION_KIND]
        if limit is not None:
            sql += " AND position <= ?"
            params.append(limit)
        rows = await tx.fetch(sql + " ORDER BY position DESC LIMIT 1", params)
        if rows:
            position, payload = rows[0]
            return level, int(position), str(payload)
    return None


def _first_kept_id(payload: str) -> str | None:
    try:
        value: Any = json.loads(payload)
    except ValueError:
        return None
    kept = value.get("firstKeptEntryId") if isinstance(value, dict) else None
    return kept if isinstance(kept, str) else None
