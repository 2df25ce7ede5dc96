"""One group commit: several sessions' entries, events and status changes in one transaction.

This is the store's only way to append entries and events (`Store.commit_batch`, the journal's
group commit, and `transcript.append` / `events.append`, which commit a batch of one session).

`GroupCommit(items, now)` merges each session's share of the items (in order), then checks and
encodes everything before a transaction opens, so bad input never holds the writer. `apply`
writes it with a fixed number of statements however many sessions and rows it holds:

1. read the sessions' counters and status, locked (SQLite: the writer's `BEGIN IMMEDIATE`;
   PostgreSQL: `FOR UPDATE`, in id order so two commits never wait on each other in a cycle),
   and in a cluster each row's owner and fencing token (`Database.fence`: a session another node
   took refuses the whole batch with `Fenced`);
2. check them here: the session exists, its events continue its log exactly (`last_seq + 1`,
   `+ 2`, ...), each status change is allowed (staying in the same status is); entries take the
   positions after `last_position`;
3. one statement each (`DirectWrite.update_many`, `insert_many`): the sessions' new counters,
   status and `updated_at`; the entries; the events (plus one UPDATE per session whose settings
   change, which is rare);
4. the batch's extra writes (`ExtraWrite`: a run's record, its inputs' outcome), in order.

The transaction is a direct write (`Database.write_direct`): SQLite's direct `sqlite3`
connection, PostgreSQL's asyncpg driver (one round trip per statement, the rows of a table as
arrays). Any failure leaves the
whole batch unwritten.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from sessions import _store_rows as rows
from sessions._direct_write import Col, DirectWrite, is_unique_violation
from sessions.db import Database
from sessions.errors import Conflict, InvalidTransition, NotFound, SeqConflict
from sessions.ids import new_id
from sessions.records import JSONObject, NewEntry, NewEvent
from sessions.schema import EntryKind, SessionStatus
from sessions.session_events import SessionEvent
from sessions.session_status import SESSION_TRANSITIONS
from sessions.session_tree import settings_values

__all__ = ["BatchItem", "Committed", "ExtraWrite", "GroupCommit", "PreparedEntry", "apply"]

BatchItem = tuple[str, Sequence[NewEntry], Sequence[NewEvent | SessionEvent], Mapping[str, Any] | None]
"""One session's share of a group commit: (session id, entries, events, settings and/or status)."""
ExtraWrite = Callable[[DirectWrite], Awaitable[None]]
"""Writes to other tables that commit with a batch (or not at all), run after its own statements
in the same transaction. Run again from the start when the batch is retried, so it must not keep
anything from an earlier try; raising leaves the whole batch unwritten."""

_TEXT, _BIGINT = "text", "bigint"
_SESSION_ID = Col("id", _TEXT)
_COUNTERS = (
    Col("status", _TEXT),
    Col("last_position", _BIGINT),
    Col("last_seq", _BIGINT),
    Col("updated_at", _BIGINT),
)
_ENTRIES = (
    Col("id", _TEXT),
    Col("session_id", _TEXT),
    Col("position", _BIGINT),
    Col("kind", _TEXT),
    Col("payload", _TEXT),
    Col("created_at", _BIGINT),
)
_EVENTS = (
    Col("session_id", _TEXT),
    Col("seq", _BIGINT),
    Col("run_id", _TEXT),
    Col("type", _TEXT),
    Col("payload", _TEXT),
    Col("created_at", _BIGINT),
)
_SELECT = "SELECT id, status, last_position, last_seq, updated_at FROM sessions"
# In a cluster: with the owner and fencing token each row must still have (`sessions.ownership`).
_SELECT_FENCED = (
    "SELECT id, status, last_position, last_seq, updated_at, owner_node, owner_token FROM sessions"
)
# Bound on `IN (...)` lists, well under SQLite's limit on bound parameters.
_CHUNK = 500


class PreparedEntry(NamedTuple):
    """An entry checked and encoded: its id (given or new), kind, stored text, and the caller's
    payload (records returned share it; records are read-only)."""

    id: str
    kind: EntryKind
    text: str
    payload: JSONObject


class _Counters(NamedTuple):
    """What a commit reads of each session before it writes."""

    status: str
    last_position: int
    last_seq: int
    updated_at: int


class _Share(msgspec.Struct):
    """One session's part of a commit, merged from its items in order."""

    session_id: str
    entries: list[PreparedEntry] = msgspec.field(default_factory=list)
    events: list[tuple[str, int, str | None, str, str, int]] = msgspec.field(default_factory=list)
    """Event rows as stored: (session id, seq, run id, type, payload text, created_at)."""
    statuses: list[SessionStatus] = msgspec.field(default_factory=list)
    settings: dict[str, Any] = msgspec.field(default_factory=dict)


class Committed(msgspec.Struct, frozen=True):
    """What a commit wrote: its time (every row's `created_at`) and, per session that appended
    entries, the position of its first new entry."""

    now: int
    first_positions: dict[str, int]


class GroupCommit:
    """A batch checked and encoded, ready for `apply`. Raise InvalidRequest for an unknown entry
    kind, status or setting, or a payload JSON cannot hold; SeqConflict when one session's events
    do not increase by one."""

    __slots__ = ("now", "shares")

    def __init__(self, items: Iterable[BatchItem], now: int) -> None:
        self.now = now
        shares: dict[str, _Share] = {}
        for session_id, entries, events, fields in items:
            share = shares.get(session_id)
            if share is None:
                share = shares[session_id] = _Share(session_id)
            share.entries.extend(map(prepare_entry, entries))
            share.events.extend(_event_row(session_id, event, now) for event in events)
            if fields:
                changes = dict(fields)
                status = changes.pop("status", None)
                if status is not None:
                    share.statuses.append(rows.parse(SessionStatus, status, "session status"))
                share.settings.update(changes)
        for share in shares.values():
            _check_contiguous(share)
            if share.settings:
                share.settings = settings_values(share.settings)
        self.shares = [s for s in shares.values() if s.entries or s.events or s.statuses or s.settings]

    def plan(
        self, current: Mapping[str, _Counters]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, int]]:
        """Check the batch against the sessions' `current` counters and return the rows to write:
        (counters, entries, events, first entry position per session). Raise NotFound,
        SeqConflict or InvalidTransition for the first share that does not fit."""
        now = self.now
        counters: list[tuple[Any, ...]] = []
        entry_rows: list[tuple[Any, ...]] = []
        event_rows: list[tuple[Any, ...]] = []
        firsts: dict[str, int] = {}
        for share in self.shares:
            sid = share.session_id
            found = current.get(sid)
            if found is None:
                raise NotFound(f"no session {sid}")
            status, position, last_seq, updated_at = found
            if share.events:
                first_seq = share.events[0][1]
                if first_seq != last_seq + 1:
                    raise SeqConflict(sid, last_seq + 1, first_seq)
                last_seq = share.events[-1][1]
                event_rows.extend(share.events)
            for target in share.statuses:
                status = _transition(sid, status, target)
            if share.entries:
                firsts[sid] = position + 1
                entry_rows.extend(
                    (entry.id, sid, position + i, entry.kind.value, entry.text, now)
                    for i, entry in enumerate(share.entries, 1)
                )
                position += len(share.entries)
            if share.entries or share.statuses or share.settings:
                updated_at = now
            counters.append((status, position, last_seq, updated_at, sid))
        return counters, entry_rows, event_rows, firsts

    def settings_updates(self) -> list[tuple[str, list[Any]]]:
        """(UPDATE with `?` placeholders, its parameters) per session whose settings change."""
        updates = []
        for share in self.shares:
            if share.settings:
                assignments = ", ".join(f"{column} = ?" for column in share.settings)
                params = [*share.settings.values(), share.session_id]
                updates.append((f"UPDATE sessions SET {assignments} WHERE id = ?", params))
        return updates

    def conflict(self, error: BaseException) -> Conflict:
        """The Conflict for an entry id that already exists."""
        owners = [s.session_id for s in self.shares if s.entries]
        where = f"session {owners[0]}" if len(owners) == 1 else "a group commit"
        conflict = Conflict(f"{where}: an appended entry id already exists")
        conflict.__cause__ = error
        return conflict


async def apply(database: Database, commit: GroupCommit, extra: Sequence[ExtraWrite] = ()) -> Committed:
    """Write `commit`, then `extra`, in one transaction on `database`; the errors are those of
    `GroupCommit.plan`, Conflict for an entry id that exists, what `extra` raises, and the
    database's (StoreUnavailable when it is locked, busy or unreachable; StoreError otherwise)."""
    if not commit.shares and not extra:
        return Committed(commit.now, {})
    async with database.write_direct() as tx:
        ids = sorted(share.session_id for share in commit.shares)
        current: dict[str, _Counters] = {}
        fence = database.fence
        select = _SELECT if fence is None else _SELECT_FENCED
        for start in range(0, len(ids), _CHUNK):
            condition, params = tx.in_list("id", ids[start : start + _CHUNK])
            query = f"{select} WHERE {condition} ORDER BY id{tx.row_lock}"
            for sid, *values in await tx.fetch(query, params):
                if fence is not None:
                    fence.check(sid, values[4], values[5])
                current[sid] = _Counters(*values[:4])
        counters, entry_rows, event_rows, firsts = commit.plan(current)
        await tx.update_many("sessions", _SESSION_ID, _COUNTERS, counters)
        for statement, values in commit.settings_updates():
            await tx.execute(statement, values)
        if entry_rows:
            try:
                await tx.insert_many("entries", _ENTRIES, entry_rows)
            except Exception as error:
                if is_unique_violation(error):
                    raise commit.conflict(error) from error
                raise
        if event_rows:
            await tx.insert_many("events", _EVENTS, event_rows)
        for write in extra:
            await write(tx)
    return Committed(commit.now, firsts)


def prepare_entry(entry: NewEntry) -> PreparedEntry:
    """`entry` checked and encoded. Raise InvalidRequest for an unknown kind or a payload JSON
    cannot hold."""
    kind = rows.parse(EntryKind, entry.kind, "entry kind")
    return PreparedEntry(entry.id or new_id(), kind, rows.dumps(entry.payload), entry.payload)


def _event_row(
    session_id: str, event: NewEvent | SessionEvent, now: int
) -> tuple[str, int, str | None, str, str, int]:
    if isinstance(event, SessionEvent):
        # The event keeps its encoded payload, which the gateway then reuses.
        return (session_id, event.seq, event.run_id, event.name, event.log_json(), now)
    return (session_id, event.seq, event.run_id, event.type, rows.dumps(event.payload), now)


def _check_contiguous(share: _Share) -> None:
    if not share.events:
        return
    first = share.events[0][1]
    for offset, row in enumerate(share.events):
        if row[1] != first + offset:
            raise SeqConflict(share.session_id, first + offset, row[1])


def _transition(session_id: str, current: str, target: SessionStatus) -> str:
    """`target` when `SESSION_TRANSITIONS` allow it from `current` (or it is `current`)."""
    if current == target.value or target in SESSION_TRANSITIONS.get(SessionStatus(current), ()):
        return target.value
    allowed = {state.value for state, targets in SESSION_TRANSITIONS.items() if target in targets}
    raise InvalidTransition(f"session {session_id}", current, target.value, allowed | {target.value})
