"""The store: the persistent state of sessions, one area per concept over one shared database.

One `Store` per database. Open it with `await Store.open(url)` (or `async with Store.open(url)
as store`), which first upgrades the schema to the newest migration; close it with `aclose()`.
A process that keeps more of its own state in the same database (the gateway's channel store)
opens the database with `open_database` and builds the `Store` and its own store on it.

The areas, each with its SQL in its own module:

- `store.tree` (`sessions.session_tree`): sessions, their keys, branches, status and totals;
- `store.transcript` (`sessions.transcripts`): transcript entries and model contexts;
- `store.events` (`sessions.event_log`): the durable event log;
- `store.runs` (`sessions.run_log`): run records;
- `store.inputs` (`sessions.input_ledger`): the input ledger.

`commit_batch` writes several sessions' entries, events and status changes in one transaction
(the journal's group commit).

Rules that hold for every method of the store and its areas:

- Every call is one transaction: it happens completely or not at all.
- Failures are `sessions.errors`: NotFound for a missing session, entry, run, input or key the
  call acts on; Conflict, KeyConflict, SeqConflict and InvalidTransition when the request
  contradicts what is stored; InvalidRequest for an argument value the call does not accept
  (an unknown kind or status, a payload JSON cannot hold), raised before anything is written;
  StoreUnavailable (retryable) when the database is locked, busy or unreachable; StoreError
  otherwise. Lookups named `get*` return None instead of raising NotFound.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any

from sqlalchemy import text, update

from migrations import runner as migration_runner
from sessions import _store_rows as rows
from sessions import db as _db
from sessions.errors import NotFound, StoreError
from sessions.event_log import EventLog, append_events, encode_events
from sessions.input_ledger import InputLedger
from sessions.records import (
    ContextEntry,
    EntryRecord,
    EventRecord,
    InputRecord,
    NewEntry,
    NewEvent,
    RunRecord,
    SessionRecord,
    TreeNode,
)
from sessions.run_log import RunLog
from sessions.schema import SessionStatus, sessions
from sessions.session_tree import SESSION_TRANSITIONS, UNSET, SessionTree, settings_values, transition
from sessions.transcripts import PreparedEntries, Transcripts, append_entries

__all__ = [
    "SESSION_TRANSITIONS",
    "UNSET",
    "BatchItem",
    "ContextEntry",
    "EntryRecord",
    "EventLog",
    "EventRecord",
    "InputLedger",
    "InputRecord",
    "NewEntry",
    "NewEvent",
    "RunLog",
    "RunRecord",
    "SessionRecord",
    "SessionTree",
    "Store",
    "Transcripts",
    "TreeNode",
    "default_url",
    "open_database",
]

default_url = _db.default_url

BatchItem = tuple[str, Sequence[NewEntry], Sequence[NewEvent], Mapping[str, Any] | None]
"""One session's share of `commit_batch`: (session id, entries, events, settings and/or status)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def open_database(
    url: str,
    *,
    busy_timeout_ms: int = _db.DEFAULT_BUSY_TIMEOUT_MS,
    write_wait_ms: int = _db.DEFAULT_WRITE_WAIT_MS,
) -> _db.Database:
    """Open the database at `url` and upgrade its schema to the newest migration.

    `url` is a SQLAlchemy URL (`sqlite:///path`, `postgresql://user@host/db`, optionally
    `?schema=NAME`); the async driver is chosen here. `busy_timeout_ms`: how long SQLite waits
    for another process's lock before a call fails with StoreUnavailable. The caller closes it
    (`Store.aclose()` does, for the store built on it). Raise StoreUnavailable when the database
    cannot be reached or stays locked, StoreError when the URL is not supported or the schema is
    newer than this program.
    """
    database = _db.Database.open(url, busy_timeout_ms=busy_timeout_ms, write_wait_ms=write_wait_ms)
    try:
        await database.migrate(_upgrade)
    except BaseException:
        await database.aclose()
        raise
    return database


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
        """The store over `database`, whose schema must be current (`open_database`). `clock`
        returns Unix milliseconds. `aclose()` closes the database."""
        self._db = database
        self._clock = clock
        self.tree = SessionTree(database, clock)
        self.transcript = Transcripts(database, clock)
        self.events = EventLog(database, clock)
        self.runs = RunLog(database, clock)
        self.inputs = InputLedger(database, clock)

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
        """Open the database at `url` as `open_database` does and build the store on it."""

        async def opening() -> Store:
            database = await open_database(url, busy_timeout_ms=busy_timeout_ms, write_wait_ms=write_wait_ms)
            return cls(database, clock=clock)

        return _StoreOpener(opening)

    async def aclose(self) -> None:
        """Close the database (every connection). Idempotent; later calls raise StoreClosed."""
        await self._db.aclose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def database(self) -> _db.Database:
        """The database the store works on (its URL, its engines for instrumentation)."""
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

    # -- group commit ----------------------------------------------------------------------------

    async def commit_batch(self, items: Sequence[BatchItem]) -> None:
        """Apply several sessions' appends and changes in ONE transaction (one disk sync).

        Each item is (session id, entries, events, fields); `fields` may hold settings (as in
        `tree.update_session`) and `status` (a guarded transition; staying in the same status is
        allowed). Items apply in order, entries then events then fields. Everything is checked
        and encoded first; a failure anywhere (the errors of `transcript.append`,
        `events.append`, `tree.set_status`) leaves the whole batch unwritten.
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
                    PreparedEntries(new_entries),
                    new_events,
                    encode_events(session_id, new_events),
                    settings_values(changes),
                    targets,
                )
            )
        async with self._db.write() as conn:
            now = self._clock()
            for session_id, prepared, new_events, payloads, values, targets in plan:
                if prepared.items:
                    await append_entries(conn, session_id, prepared, now)
                if new_events:
                    await append_events(conn, session_id, new_events, payloads, now)
                for target in targets:
                    await transition(conn, session_id, target, None, now=now, same_ok=True)
                if values:
                    statement = update(sessions).where(sessions.c.id == session_id)
                    if (await conn.execute(statement.values(updated_at=now, **values))).rowcount == 0:
                        raise NotFound(f"no session {session_id}")


def _upgrade(connection: Any) -> None:
    """Bring the schema to the newest migration (runs inside the store's write transaction)."""
    from alembic.util import CommandError

    try:
        migration_runner.upgrade(connection)
    except CommandError as error:
        raise StoreError(
            f"cannot upgrade the database schema ({error}); was it written by a newer gateway?"
        ) from error
