"""The store: sessions and their tree, transcripts, the event log, runs and the input ledger.

One `Store` per database. Open it with `await Store.open(url)` (or `async with Store.open(url)
as store`), which first upgrades the schema to the newest migration; close it with `aclose()`.

Rules that hold for every method:

- Every call is one transaction: it happens completely or not at all.
- Failures are `sessions.errors`: NotFound for a missing session, entry, run, input or key the
  call acts on; Conflict, KeyConflict, SeqConflict and InvalidTransition when the request
  contradicts what is stored; InvalidRequest for an argument value the call does not accept
  (an unknown kind or status, a payload JSON cannot hold), raised before anything is written;
  StoreUnavailable (retryable) when the database is locked, busy or unreachable; StoreError
  otherwise. Lookups named `get_*` return None instead of raising NotFound.

Branching never copies entries (see `sessions._store_tree` for how transcripts are assembled).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Coroutine, Generator, Mapping, Sequence
from enum import Enum
from types import TracebackType
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from migrations import runner as migration_runner
from sessions import _store_rows as rows
from sessions import _store_tree as tree_queries
from sessions import db as _db
from sessions.errors import (
    Conflict,
    InvalidRequest,
    InvalidTransition,
    KeyConflict,
    NotFound,
    SeqConflict,
    StoreError,
)
from sessions.ids import new_id
from sessions.records import (
    ContextEntry,
    EntryRecord,
    EventRecord,
    InputRecord,
    JSONObject,
    NewEntry,
    NewEvent,
    RunRecord,
    SessionRecord,
    TreeNode,
)
from sessions.schema import (
    EntryKind,
    InputStatus,
    RunStatus,
    SessionKind,
    SessionStatus,
    entries,
    events,
    inputs,
    runs,
    session_keys,
    sessions,
)

__all__ = [
    "SESSION_TRANSITIONS",
    "UNSET",
    "BatchItem",
    "ContextEntry",
    "EntryRecord",
    "EventRecord",
    "InputRecord",
    "NewEntry",
    "NewEvent",
    "RunRecord",
    "SessionRecord",
    "Store",
    "TreeNode",
    "default_url",
]

default_url = _db.default_url

# The statuses a session may move to from each status.
SESSION_TRANSITIONS: Final[Mapping[SessionStatus, frozenset[SessionStatus]]] = {
    SessionStatus.IDLE: frozenset({SessionStatus.RUNNING, SessionStatus.ARCHIVED}),
    SessionStatus.RUNNING: frozenset({SessionStatus.IDLE, SessionStatus.INTERRUPTED}),
    SessionStatus.INTERRUPTED: frozenset({SessionStatus.RUNNING, SessionStatus.IDLE, SessionStatus.ARCHIVED}),
    SessionStatus.ARCHIVED: frozenset({SessionStatus.IDLE}),
}
# An input in one of these has its outcome recorded and never changes again.
FINAL_INPUT_STATUSES: Final = frozenset({InputStatus.DONE, InputStatus.REJECTED, InputStatus.INTERRUPTED})
_SETTINGS: Final = ("label", "model", "thinking_level", "queue_mode", "origin")
# Bound on `IN (...)` lists, well under every backend's limit on bound parameters.
_CHUNK: Final = 400


class _Unset(Enum):
    UNSET = "UNSET"


UNSET: Final = _Unset.UNSET
"""Marks an argument that was not given, where None is a meaningful value."""

BatchItem = tuple[str, Sequence[NewEntry], Sequence[NewEvent], Mapping[str, Any] | None]
"""One session's share of `commit_batch`: (session id, entries, events, settings and/or status)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _chunks(items: Sequence[str]) -> Generator[Sequence[str], None, None]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _settings(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Column values for session settings; raise InvalidRequest for anything else."""
    unknown = sorted(set(fields) - set(_SETTINGS))
    if unknown:
        raise InvalidRequest(
            f"cannot change session field(s) {', '.join(unknown)}; only {', '.join(_SETTINGS)}"
        )
    values = dict(fields)
    if "origin" in values:
        values["origin"] = None if values["origin"] is None else rows.dumps(values["origin"])
    return values


class _Prepared:
    """Entries checked and encoded before a write transaction opens (so bad input never holds the
    writer)."""

    __slots__ = ("items", "originals")

    def __init__(self, items: Sequence[NewEntry]) -> None:
        self.items = [
            (rows.parse(EntryKind, item.kind, "entry kind"), rows.dumps(item.payload), item.id or new_id())
            for item in items
        ]
        # The records returned share the caller's payload objects (records are read-only).
        self.originals = [(kind, item.payload) for (kind, _, _), item in zip(self.items, items, strict=True)]


def _check_contiguous(session_id: str, items: Sequence[NewEvent]) -> list[str]:
    """Raise SeqConflict unless the batch's seqs increase by one; return the encoded payloads."""
    first = items[0].seq if items else 0
    for offset, item in enumerate(items):
        if item.seq != first + offset:
            raise SeqConflict(session_id, first + offset, item.seq)
    return [rows.dumps(item.payload) for item in items]


class _StoreOpener:
    """What `Store.open()` returns: await it, or use it as an async context manager."""

    def __init__(self, opening: Callable[[], Coroutine[Any, Any, Store]]) -> None:
        self._opening = opening
        self._store: Store | None = None

    def __await__(self) -> Generator[Any, None, Store]:
        return self._opening().__await__()

    async def __aenter__(self) -> Store:
        self._store = await self._opening()
        return self._store

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._store is not None:
            await self._store.aclose()


class Store:
    """The persistent state of sessions. The module docstring states the rules of every method."""

    def __init__(self, database: _db.Database, *, clock: Callable[[], int] = _now_ms) -> None:
        """Wrap a database whose schema is already current; use `Store.open()` instead."""
        self._db = database
        self._clock = clock

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str,
        *,
        busy_timeout_ms: int = _db.DEFAULT_BUSY_TIMEOUT_MS,
        write_wait_ms: int = _db.DEFAULT_WRITE_WAIT_MS,
        clock: Callable[[], int] = _now_ms,
    ) -> _StoreOpener:
        """Open the database at `url` and upgrade its schema to the newest migration.

        `url` is a SQLAlchemy URL (`sqlite:///path`, `postgresql://user@host/db`, optionally
        `?schema=NAME`); the async driver is chosen here. `busy_timeout_ms`: how long SQLite waits
        for another process's lock before a call fails with StoreUnavailable. `clock` returns Unix
        milliseconds. Raise StoreUnavailable when the database cannot be reached or stays locked,
        StoreError when the URL is not supported or the schema is newer than this program.
        """

        async def opening() -> Store:
            database = _db.Database.open(url, busy_timeout_ms=busy_timeout_ms, write_wait_ms=write_wait_ms)
            try:
                await database.migrate(_upgrade)
            except BaseException:
                await database.aclose()
                raise
            return cls(database, clock=clock)

        return _StoreOpener(opening)

    async def aclose(self) -> None:
        """Close every connection. Idempotent; later calls raise StoreClosed."""
        await self._db.aclose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def database(self) -> _db.Database:
        """The engines behind the store (for instrumentation and benchmarks)."""
        return self._db

    @property
    def backend(self) -> str:
        """`sqlite` or `postgresql`."""
        return self._db.backend

    async def database_size(self) -> int | None:
        """Bytes the store occupies (SQLite: database and WAL file; PostgreSQL: its tables)."""
        async with self._db.read() as conn:
            if self._db.backend == "sqlite":
                pages = (await conn.execute(text("PRAGMA page_count"))).scalar_one()
                page_size = (await conn.execute(text("PRAGMA page_size"))).scalar_one()
                size = int(pages) * int(page_size)
                path = self._db.sqlite_path
                wal = None if path is None else path.with_name(path.name + "-wal")
                return size + (wal.stat().st_size if wal is not None and wal.exists() else 0)
            total = (
                await conn.execute(
                    text(
                        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                    )
                )
            ).scalar_one()
            return None if total is None else int(total)

    # -- sessions --------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        agent_id: str,
        key: str | None = None,
        kind: SessionKind | str = SessionKind.MAIN,
        parent_id: str | None = None,
        branch_point: str | None = None,
        label: str | None = None,
        model: str | None = None,
        thinking_level: str | None = None,
        queue_mode: str | None = None,
        origin: JSONObject | None = None,
    ) -> SessionRecord:
        """Create an idle session, optionally a child of `parent_id` forking at `branch_point`.

        Raise KeyConflict when `key` already names a session; NotFound when the parent does not
        exist or `branch_point` is not in the parent's transcript.
        """
        settings = {
            "agent_id": agent_id,
            "kind": rows.parse(SessionKind, kind, "session kind"),
            "label": label,
            "model": model,
            "thinking_level": thinking_level,
            "queue_mode": queue_mode,
            "origin": None if origin is None else rows.dumps(origin),
        }
        if branch_point is not None and parent_id is None:
            raise InvalidRequest("a branch point needs a parent session")
        async with self._db.write() as conn:
            parent = None
            if parent_id is not None:
                parent = await self._session_row(conn, parent_id)
                if branch_point is not None:
                    await tree_queries.require_visible(conn, parent_id, branch_point)
            return await self._insert_session(
                conn, settings, key=key, parent=parent, branch_point=branch_point
            )

    async def get_session(self, session_id: str) -> SessionRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))).first()
            return (
                None if row is None else rows.session_record(row._mapping, await self._keys(conn, session_id))
            )

    async def get_session_by_key(self, key: str) -> SessionRecord | None:
        """The session `key` points at, or None when the key is unused."""
        query = (
            select(sessions)
            .join(session_keys, session_keys.c.session_id == sessions.c.id)
            .where(session_keys.c.key == key)
        )
        async with self._db.read() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return None
            return rows.session_record(row._mapping, await self._keys(conn, row._mapping["id"]))

    async def keys_of(self, session_id: str) -> list[str]:
        """The keys that point at the session, sorted (empty when none)."""
        async with self._db.read() as conn:
            return await self._keys(conn, session_id)

    async def list_sessions(
        self,
        *,
        agent_id: str | None = None,
        kind: SessionKind | str | None = None,
        status: SessionStatus | str | None = None,
        parent_id: str | _Unset | None = UNSET,
        include_archived: bool = False,
        search: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[SessionRecord], int]:
        """One page of sessions, most recently updated first, and how many match in all.

        `parent_id=None` lists roots only; leaving it out lists every level. Archived sessions are
        left out unless `include_archived` or `status="archived"`. `search` matches part of the
        label, id, agent id or any key, ignoring case.
        """
        conditions: list[ColumnElement[bool]] = []
        if agent_id is not None:
            conditions.append(sessions.c.agent_id == agent_id)
        if kind is not None:
            conditions.append(sessions.c.kind == rows.parse(SessionKind, kind, "session kind").value)
        if status is not None:
            conditions.append(sessions.c.status == rows.parse(SessionStatus, status, "session status").value)
        elif not include_archived:
            conditions.append(sessions.c.status != SessionStatus.ARCHIVED.value)
        if parent_id is None:
            conditions.append(sessions.c.parent_id.is_(None))
        elif not isinstance(parent_id, _Unset):
            conditions.append(sessions.c.parent_id == parent_id)
        if search:
            pattern = _like(search)
            conditions.append(
                or_(
                    sessions.c.label.ilike(pattern, escape="\\"),
                    sessions.c.id.ilike(pattern, escape="\\"),
                    sessions.c.agent_id.ilike(pattern, escape="\\"),
                    exists().where(
                        session_keys.c.session_id == sessions.c.id,
                        session_keys.c.key.ilike(pattern, escape="\\"),
                    ),
                )
            )
        where = and_(True, *conditions)
        page = (
            select(sessions)
            .where(where)
            .order_by(sessions.c.updated_at.desc(), sessions.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self._db.read() as conn:
            total = (await conn.execute(select(func.count()).select_from(sessions).where(where))).scalar_one()
            found = (await conn.execute(page)).all()
            keys = await self._keys_by_session(conn, [row._mapping["id"] for row in found])
        return [rows.session_record(row._mapping, keys.get(row._mapping["id"], ())) for row in found], int(
            total
        )

    async def tree(self, session_id: str) -> TreeNode:
        """The whole tree containing the session, from its root; archived sessions included."""
        async with self._db.read() as conn:
            root_id = (
                await conn.execute(select(sessions.c.root_id).where(sessions.c.id == session_id))
            ).scalar_one_or_none()
            if root_id is None:
                raise NotFound(f"no session {session_id}")
            members = (await conn.execute(select(sessions).where(sessions.c.root_id == root_id))).all()
            key_rows = await conn.execute(
                select(session_keys.c.key, session_keys.c.session_id)
                .join(sessions, sessions.c.id == session_keys.c.session_id)
                .where(sessions.c.root_id == root_id)
            )
            keys: dict[str, list[str]] = {}
            for key, sid in key_rows.all():
                keys.setdefault(sid, []).append(key)
        records = [rows.session_record(row._mapping, keys.get(row._mapping["id"], ())) for row in members]
        return tree_queries.build_tree(records, root_id)

    async def branch(
        self,
        session_id: str,
        *,
        at_entry_id: str | None = None,
        key: str | None = None,
        label: str | None = None,
        kind: SessionKind | str = SessionKind.BRANCH,
    ) -> SessionRecord:
        """A new child session forking from the session's transcript at `at_entry_id`.

        The default branch point is the session's last visible entry: its own last entry, or its
        own branch point when it has none. Agent, model, thinking level, queue mode and origin are
        inherited. Nothing is copied, so the cost does not depend on the transcript's length.
        Raise NotFound when the session does not exist or the entry is not in its transcript,
        KeyConflict when `key` is in use.
        """
        branch_kind = rows.parse(SessionKind, kind, "session kind")
        async with self._db.write() as conn:
            source = await self._session_row(conn, session_id)
            m = source._mapping
            point: str | None
            if at_entry_id is not None:
                await tree_queries.require_visible(conn, session_id, at_entry_id)
                point = at_entry_id
            elif m["last_position"] > 0:
                last = select(entries.c.id).where(
                    entries.c.session_id == session_id, entries.c.position == m["last_position"]
                )
                point = (await conn.execute(last)).scalar_one()
            else:
                point = m["branch_point"]
            settings = {
                name: m[name] for name in ("agent_id", "model", "thinking_level", "queue_mode", "origin")
            }
            settings.update(kind=branch_kind, label=label)
            return await self._insert_session(conn, settings, key=key, parent=source, branch_point=point)

    async def switch_key(self, key: str, session_id: str) -> str | None:
        """Point `key` at the session, creating the key when new; return the session it pointed
        at before (None when new). Raise NotFound when the session does not exist."""
        async with self._db.write() as conn:
            await self._session_row(conn, session_id)
            previous = await self._key_owner(conn, key)
            upsert = self._insert(session_keys).values(key=key, session_id=session_id)
            await conn.execute(
                upsert.on_conflict_do_update(index_elements=["key"], set_={"session_id": session_id})
            )
            return previous

    async def reset(self, key: str, *, archive_old: bool = True) -> SessionRecord:
        """Start a fresh root session for the conversation `key` names and move the key to it.

        The new session takes the old one's agent, kind (a branch's: its root's kind), model,
        thinking level, queue mode and origin. The old session keeps its transcript and its place
        in its tree; with `archive_old` it is archived, which it must allow (abort a running
        session first). Raise NotFound for an unused key, InvalidTransition when the old session
        cannot be archived.
        """
        async with self._db.write() as conn:
            old_id = await self._key_owner(conn, key)
            if old_id is None:
                raise NotFound(f"no session key {key!r}")
            m = (await self._session_row(conn, old_id))._mapping
            if archive_old:
                await self._transition(conn, old_id, SessionStatus.ARCHIVED, None, same_ok=True)
            await conn.execute(delete(session_keys).where(session_keys.c.key == key))
            settings = {
                name: m[name]
                for name in ("agent_id", "kind", "model", "thinking_level", "queue_mode", "origin")
            }
            settings["label"] = None
            if m["kind"] == SessionKind.BRANCH.value:
                # The key was switched to a branch: the fresh start is a conversation like the
                # one the branch grew from, so it takes the kind of the branch's root.
                root_kind = select(sessions.c.kind).where(sessions.c.id == m["root_id"])
                settings["kind"] = (await conn.execute(root_kind)).scalar_one()
            return await self._insert_session(conn, settings, key=key, parent=None, branch_point=None)

    async def delete_session(self, session_id: str, *, cascade: bool = False) -> int:
        """Delete the session with its entries, events, keys, runs and inputs; return how many
        sessions went. With `cascade` its descendants go too; without, raise Conflict when it has
        any. Raise NotFound when it does not exist."""
        async with self._db.write() as conn:
            await self._session_row(conn, session_id)
            doomed = await tree_queries.subtree_deepest_first(conn, session_id)
            if len(doomed) > 1 and not cascade:
                raise Conflict(f"session {session_id} has {len(doomed) - 1} descendant session(s)")
            for chunk in _chunks(doomed):
                for table in (inputs, runs, events, entries, session_keys):
                    await conn.execute(delete(table).where(table.c.session_id.in_(chunk)))
                await conn.execute(delete(sessions).where(sessions.c.id.in_(chunk)))
            return len(doomed)

    async def update_session(
        self,
        session_id: str,
        *,
        label: str | _Unset | None = UNSET,
        model: str | _Unset | None = UNSET,
        thinking_level: str | _Unset | None = UNSET,
        queue_mode: str | _Unset | None = UNSET,
        origin: JSONObject | _Unset | None = UNSET,
    ) -> SessionRecord:
        """Change the given settings (None clears one). Raise NotFound for an unknown session.

        Status changes only through the guarded `set_status`; counters through `add_usage` and
        the appends.
        """
        given: dict[str, Any] = {
            "label": label,
            "model": model,
            "thinking_level": thinking_level,
            "queue_mode": queue_mode,
            "origin": origin,
        }
        values = _settings({name: value for name, value in given.items() if not isinstance(value, _Unset)})
        async with self._db.write() as conn:
            values["updated_at"] = self._clock()
            statement = update(sessions).where(sessions.c.id == session_id).values(**values)
            row = (await conn.execute(statement.returning(*sessions.c))).first()
            if row is None:
                raise NotFound(f"no session {session_id}")
            return rows.session_record(row._mapping, await self._keys(conn, session_id))

    async def set_status(
        self,
        session_id: str,
        new: SessionStatus | str,
        *,
        expected: Collection[SessionStatus | str] | None = None,
    ) -> SessionRecord:
        """Move the session to `new` when `SESSION_TRANSITIONS` allows it from the current status
        and, if `expected` is given, the current status is one of those.

        Raise InvalidTransition naming the states it would have accepted; NotFound for an unknown
        session.
        """
        target = rows.parse(SessionStatus, new, "session status")
        allowed = (
            None if expected is None else {rows.parse(SessionStatus, s, "session status") for s in expected}
        )
        async with self._db.write() as conn:
            await self._transition(conn, session_id, target, allowed)
            return await self._record(conn, session_id)

    async def add_usage(self, session_id: str, input: int, output: int, total: int, cost: float) -> None:
        """Add a run's token counts and cost to the session's totals. Raise NotFound for an
        unknown session."""
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(
                input_tokens=sessions.c.input_tokens + input,
                output_tokens=sessions.c.output_tokens + output,
                total_tokens=sessions.c.total_tokens + total,
                cost=sessions.c.cost + cost,
            )
        )
        async with self._db.write() as conn:
            if (await conn.execute(statement.values(updated_at=self._clock()))).rowcount == 0:
                raise NotFound(f"no session {session_id}")

    # -- entries ---------------------------------------------------------------------------------

    async def append_entries(self, session_id: str, items: Sequence[NewEntry]) -> list[EntryRecord]:
        """Append entries to the session's own transcript, in order, at the next positions.

        Raise NotFound for an unknown session, Conflict when a given entry id already exists.
        """
        prepared = _Prepared(items)
        async with self._db.write() as conn:
            return await self._append_entries(conn, session_id, prepared, self._clock())

    async def transcript(self, session_id: str) -> list[EntryRecord]:
        """Every entry the session sees, in order: inherited entries up to each branch point,
        then its own. Raise NotFound for an unknown session."""
        async with self._db.read() as conn:
            parts = await tree_queries.segments(conn, session_id)
            return await tree_queries.segment_entries(conn, parts)

    async def context_entries(self, session_id: str) -> list[ContextEntry]:
        """What the session's model context is built from (`sessions.context.build_context`
        gives the same messages as for `transcript`), in transcript order: without a compaction
        on the session's path, every entry; with one, the newest compaction entry and the entries
        from its first kept entry on, payloads as stored JSON text. Entries before the newest
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
                await self._session_row(conn, session_id)
        return [rows.entry_record(row) for row in found]

    async def get_entry(self, entry_id: str) -> EntryRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(entries).where(entries.c.id == entry_id))).first()
        return None if row is None else rows.entry_record(row)

    async def count_entries(self, session_id: str) -> int:
        """How many entries the session has of its own (inherited ones are not counted)."""
        async with self._db.read() as conn:
            return int((await self._session_row(conn, session_id))._mapping["last_position"])

    # -- events ----------------------------------------------------------------------------------

    async def append_events(self, session_id: str, items: Sequence[NewEvent]) -> list[EventRecord]:
        """Append events that continue the session's log: seqs last_seq + 1, + 2, ... exactly;
        the session's `last_seq` moves in the same transaction.

        Raise SeqConflict (and store nothing) when the seqs do not continue the log, NotFound for
        an unknown session.
        """
        payloads = _check_contiguous(session_id, items)
        async with self._db.write() as conn:
            return await self._append_events(conn, session_id, items, payloads, self._clock())

    async def read_events(self, session_id: str, after_seq: int = 0, limit: int = 1000) -> list[EventRecord]:
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
        """The seq of the session's last event (0 before the first)."""
        async with self._db.read() as conn:
            return int((await self._session_row(conn, session_id))._mapping["last_seq"])

    async def prune_events(self, session_id: str, *, before_seq: int, types: Collection[str]) -> int:
        """Delete the session's events of the given `types` with seq < `before_seq`; return how
        many went. Readers then meet holes; `first_seq_after_prune` says where exact replay
        starts. Raise NotFound for an unknown session."""
        condition = and_(
            events.c.session_id == session_id, events.c.seq < before_seq, events.c.type.in_(list(types))
        )
        async with self._db.write() as conn:
            await self._session_row(conn, session_id)
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
            return int((await self._session_row(conn, session_id))._mapping["pruned_seq"])

    async def first_seq_after_prune(self, session_id: str) -> int:
        """The lowest seq from which the log is complete: every event at or above it is stored.

        A reader that has everything up to `after_seq` can replay exactly when
        `after_seq + 1 >= first_seq_after_prune(...)`; otherwise it needs a snapshot.
        """
        return await self.pruned_seq(session_id) + 1

    # -- group commit ----------------------------------------------------------------------------

    async def commit_batch(self, items: Sequence[BatchItem]) -> None:
        """Apply several sessions' appends and changes in ONE transaction (one disk sync).

        Each item is (session id, entries, events, fields); `fields` may hold settings (as in
        `update_session`) and `status` (a guarded transition; staying in the same status is
        allowed). Items apply in order, entries then events then fields. Everything is checked
        and encoded first; a failure anywhere (the errors of `append_entries`, `append_events`,
        `set_status`) leaves the whole batch unwritten.
        """
        # Items of one session are merged (in order) so each session costs one entries insert,
        # one events insert and one last_seq update per batch, however many items it queued.
        merged: dict[str, tuple[list[NewEntry], list[NewEvent], list[str], dict[str, Any]]] = {}
        for session_id, new_entries, new_events, fields in items:
            slot = merged.setdefault(session_id, ([], [], [], {}))
            slot[0].extend(new_entries)
            slot[1].extend(new_events)
            changes = dict(fields or {})
            status = changes.pop("status", None)
            if status is not None:
                slot[2].append(status)
            slot[3].update(changes)
        plan = []
        for session_id, (new_entries, new_events, statuses, changes) in merged.items():
            targets = [rows.parse(SessionStatus, status, "session status") for status in statuses]
            plan.append(
                (
                    session_id,
                    _Prepared(new_entries),
                    new_events,
                    _check_contiguous(session_id, new_events),
                    _settings(changes),
                    targets,
                )
            )
        async with self._db.write() as conn:
            now = self._clock()
            for session_id, prepared, new_events, payloads, values, targets in plan:
                if prepared.items:
                    await self._append_entries(conn, session_id, prepared, now)
                if new_events:
                    await self._append_events(conn, session_id, new_events, payloads, now)
                for target in targets:
                    await self._transition(conn, session_id, target, None, same_ok=True)
                if values:
                    statement = update(sessions).where(sessions.c.id == session_id)
                    if (await conn.execute(statement.values(updated_at=now, **values))).rowcount == 0:
                        raise NotFound(f"no session {session_id}")

    # -- runs ------------------------------------------------------------------------------------

    async def create_run(self, run_id: str, session_id: str) -> RunRecord:
        """Record a run of the session as started now. Raise Conflict when the run id exists,
        NotFound for an unknown session."""
        async with self._db.write() as conn:
            await self._session_row(conn, session_id)
            if (await conn.execute(select(runs.c.id).where(runs.c.id == run_id))).first() is not None:
                raise Conflict(f"run {run_id} already exists")
            now = self._clock()
            values = {
                "id": run_id,
                "session_id": session_id,
                "status": RunStatus.RUNNING.value,
                "started_at": now,
            }
            try:
                await conn.execute(insert(runs).values(**values))
            except sa_exc.IntegrityError as error:
                raise Conflict(f"run {run_id} already exists") from error
        return RunRecord(run_id, session_id, RunStatus.RUNNING, None, now, None, None, None)

    async def finish_run(
        self,
        run_id: str,
        status: RunStatus | str,
        termination_reason: str | None,
        error: str | None = None,
        result: Any = None,
    ) -> RunRecord:
        """Record how a running run ended (`result` is any JSON value). Raise InvalidTransition
        when the run is not running (a run ends once), NotFound for an unknown run, InvalidRequest
        for the status `running`."""
        final = rows.parse(RunStatus, status, "run status")
        if final is RunStatus.RUNNING:
            raise InvalidRequest("a run cannot finish as 'running'")
        values = {
            "status": final.value,
            "termination_reason": termination_reason,
            "error": error,
            "result": None if result is None else rows.dumps(result),
        }
        async with self._db.write() as conn:
            statement = (
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == RunStatus.RUNNING.value)
                .values(ended_at=self._clock(), **values)
                .returning(*runs.c)
            )
            row = (await conn.execute(statement)).first()
            if row is None:
                current = (await conn.execute(select(runs.c.status).where(runs.c.id == run_id))).scalar()
                if current is None:
                    raise NotFound(f"no run {run_id}")
                raise InvalidTransition(f"run {run_id}", current, final.value, {RunStatus.RUNNING.value})
        return rows.run_record(row)

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).first()
        return None if row is None else rows.run_record(row)

    async def running_runs(self) -> list[RunRecord]:
        """Runs still recorded as running, oldest first: after a crash, the ones cut off."""
        query = select(runs).where(runs.c.status == RunStatus.RUNNING.value).order_by(runs.c.started_at)
        async with self._db.read() as conn:
            found = (await conn.execute(query)).all()
        return [rows.run_record(row) for row in found]

    # -- inputs ----------------------------------------------------------------------------------

    async def record_input(
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
            existing = await self._input_row(conn, idempotency_key)
            if existing is not None:
                return rows.input_record(existing), False
            await self._session_row(conn, session_id)
            now = self._clock()
            statement = (
                self._insert(inputs)
                .values(seq=new_id(), created_at=now, updated_at=now, **values)
                .on_conflict_do_nothing(index_elements=["idempotency_key"])
            )
            # A concurrent writer (PostgreSQL) may win between the check and the insert: the
            # conflict clause waits for it and inserts nothing, and we return its row.
            created = (await conn.execute(statement)).rowcount == 1
            row = await self._input_row(conn, idempotency_key)
            if row is None:
                raise StoreError(f"input {idempotency_key!r} vanished while being recorded")
            return rows.input_record(row), created

    async def input_sources(self, session_id: str, limit: int = 50) -> list[JSONObject]:
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

    async def get_input(self, idempotency_key: str) -> InputRecord | None:
        async with self._db.read() as conn:
            row = await self._input_row(conn, idempotency_key)
        return None if row is None else rows.input_record(row)

    async def update_input(
        self,
        idempotency_key: str,
        *,
        status: InputStatus | str,
        reason: str | None = None,
        run_id: str | None = None,
    ) -> InputRecord:
        """Move an input on; `run_id` None keeps the stored one. Raise InvalidTransition once its
        outcome (done, rejected, interrupted) is recorded, NotFound for an unknown key."""
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
                current = await self._input_row(conn, idempotency_key)
                if current is None:
                    raise NotFound(f"no input {idempotency_key!r}")
                what = f"input {idempotency_key!r}"
                raise InvalidTransition(what, current._mapping["status"], state.value, open_states)
        return rows.input_record(row)

    async def inputs_with_status(
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

    # -- helpers; each runs inside the caller's transaction --------------------------------------

    def _insert(self, table: Table) -> sqlite.Insert | postgresql.Insert:
        """An INSERT that can carry an ON CONFLICT clause on this backend."""
        if self._db.backend == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    async def _session_row(self, conn: AsyncConnection, session_id: str) -> rows.AnyRow:
        row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))).first()
        if row is None:
            raise NotFound(f"no session {session_id}")
        return row

    async def _record(self, conn: AsyncConnection, session_id: str) -> SessionRecord:
        row = await self._session_row(conn, session_id)
        return rows.session_record(row._mapping, await self._keys(conn, session_id))

    async def _key_owner(self, conn: AsyncConnection, key: str) -> str | None:
        query = select(session_keys.c.session_id).where(session_keys.c.key == key)
        owner: str | None = (await conn.execute(query)).scalar_one_or_none()
        return owner

    async def _keys(self, conn: AsyncConnection, session_id: str) -> list[str]:
        query = select(session_keys.c.key).where(session_keys.c.session_id == session_id)
        return sorted((await conn.execute(query)).scalars().all())

    async def _keys_by_session(self, conn: AsyncConnection, ids: Sequence[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for chunk in _chunks(ids):
            query = select(session_keys.c.key, session_keys.c.session_id).where(
                session_keys.c.session_id.in_(chunk)
            )
            for key, sid in (await conn.execute(query)).all():
                found.setdefault(sid, []).append(key)
        return found

    async def _input_row(self, conn: AsyncConnection, key: str) -> rows.AnyRow | None:
        return (await conn.execute(select(inputs).where(inputs.c.idempotency_key == key))).first()

    async def _insert_session(
        self,
        conn: AsyncConnection,
        settings: Mapping[str, Any],
        *,
        key: str | None,
        parent: rows.AnyRow | None,
        branch_point: str | None,
    ) -> SessionRecord:
        """Insert a session from `settings` (agent_id, kind, label, model, thinking_level,
        queue_mode, origin as stored text) and point `key` at it."""
        if key is not None:
            owner = await self._key_owner(conn, key)
            if owner is not None:
                raise KeyConflict(key, owner)
        session_id = new_id()
        now = self._clock()
        values: dict[str, Any] = {
            **settings,
            "id": session_id,
            "parent_id": None if parent is None else parent._mapping["id"],
            "root_id": session_id if parent is None else parent._mapping["root_id"],
            "branch_point": branch_point,
            "status": SessionStatus.IDLE.value,
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            "cost": 0.0,
            "last_position": 0,
            "last_seq": 0,
            "pruned_seq": 0,
            "created_at": now,
            "updated_at": now,
        }
        values["kind"] = SessionKind(values["kind"]).value
        await conn.execute(insert(sessions).values(**values))
        if key is not None:
            try:
                await conn.execute(insert(session_keys).values(key=key, session_id=session_id))
            except sa_exc.IntegrityError as error:
                # Another connection took the key after our check (PostgreSQL).
                raise KeyConflict(key) from error
        return rows.session_record(values, () if key is None else (key,))

    async def _append_entries(
        self, conn: AsyncConnection, session_id: str, prepared: _Prepared, now: int
    ) -> list[EntryRecord]:
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

    async def _append_events(
        self,
        conn: AsyncConnection,
        session_id: str,
        items: Sequence[NewEvent],
        payloads: Sequence[str],
        now: int,
    ) -> list[EventRecord]:
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
            current = int((await self._session_row(conn, session_id))._mapping["last_seq"])
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
        return [
            EventRecord(session_id, item.seq, item.run_id, item.type, item.payload, now) for item in items
        ]

    async def _transition(
        self,
        conn: AsyncConnection,
        session_id: str,
        target: SessionStatus,
        expected: set[SessionStatus] | None,
        *,
        same_ok: bool = False,
    ) -> None:
        allowed = {state for state, targets in SESSION_TRANSITIONS.items() if target in targets}
        if same_ok:
            allowed.add(target)
        if expected is not None:
            allowed &= expected
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id, sessions.c.status.in_([s.value for s in allowed]))
            .values(status=target.value, updated_at=self._clock())
        )
        if (await conn.execute(statement)).rowcount == 1:
            return
        current = (await self._session_row(conn, session_id))._mapping["status"]
        raise InvalidTransition(f"session {session_id}", current, target.value, (s.value for s in allowed))


def _upgrade(connection: Any) -> None:
    """Bring the schema to the newest migration (runs inside the store's write transaction)."""
    from alembic.util import CommandError

    try:
        migration_runner.upgrade(connection)
    except CommandError as error:
        raise StoreError(
            f"cannot upgrade the database schema ({error}); was it written by a newer gateway?"
        ) from error
