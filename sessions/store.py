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
(the journal's group commit; `sessions._group_commit` says how).

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
from collections.abc import Callable, Coroutine, Generator, Sequence
from types import TracebackType
from typing import Any

from sqlalchemy import inspect, text

from migrations.head import HEAD_REVISION
from sessions import _group_commit as group_commit
from sessions import db as _db
from sessions._group_commit import BatchItem, ExtraWrite
from sessions.errors import StoreError
from sessions.event_log import EventLog
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
from sessions.session_status import SESSION_TRANSITIONS
from sessions.session_tree import UNSET, SessionTree
from sessions.transcripts import Transcripts

__all__ = [
    "SESSION_TRANSITIONS",
    "UNSET",
    "BatchItem",
    "ContextEntry",
    "EntryRecord",
    "EventLog",
    "EventRecord",
    "ExtraWrite",
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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def open_database(
    url: str,
    *,
    busy_timeout_ms: int = _db.DEFAULT_BUSY_TIMEOUT_MS,
    write_wait_ms: int = _db.DEFAULT_WRITE_WAIT_MS,
    idle_transaction_timeout_ms: int | None = None,
) -> _db.Database:
    """Open the database at `url` and upgrade its schema to the newest migration.

    `url` is a SQLAlchemy URL (`sqlite:///path`, `postgresql://user@host/db`, optionally
    `?schema=NAME`); the async driver is chosen here. `busy_timeout_ms`: how long SQLite waits
    for another process's lock before a call fails with StoreUnavailable;
    `idle_transaction_timeout_ms` see `Database.open`. The caller closes it
    (`Store.aclose()` does, for the store built on it). Raise StoreUnavailable when the database
    cannot be reached or stays locked, StoreError when the URL is not supported or the schema is
    newer than this program.
    """
    database = _db.Database.open(
        url,
        busy_timeout_ms=busy_timeout_ms,
        write_wait_ms=write_wait_ms,
        idle_transaction_timeout_ms=idle_transaction_timeout_ms,
    )
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

    async def commit_batch(self, items: Sequence[BatchItem], extra: Sequence[ExtraWrite] = ()) -> None:
        """Apply several sessions' appends and changes in ONE transaction (one disk sync).

        Each item is (session id, entries, events, fields); events are `NewEvent`s or the
        journal's `SessionEvent`s (stored as `log_json()`, their payload encoded once); `fields`
        may hold settings (as in `tree.update_session`) and `status` (a guarded transition;
        staying in the same status is allowed). Items of one session apply in order.
        Everything is checked and encoded first; a failure anywhere (the errors of
        `transcript.append`, `events.append`, `tree.set_status`) leaves the whole batch unwritten.
        `extra` writes other tables in the same transaction, after the items (`ExtraWrite`).
        """
        await group_commit.apply(self._db, group_commit.GroupCommit(items, self._clock()), extra)


def _upgrade(connection: Any) -> None:
    """Bring the schema to the newest migration (runs inside the store's write transaction).

    A database that already records the newest revision is recognised with a plain query; the
    migration tooling (Alembic, Mako) is loaded only when there is something to upgrade.
    """
    if _recorded_revisions(connection) == [HEAD_REVISION]:
        return
    from alembic.util import CommandError

    from migrations import runner as migration_runner

    try:
        migration_runner.upgrade(connection)
    except CommandError as error:
        raise StoreError(
            f"cannot upgrade the database schema ({error}); was it written by a newer gateway?"
        ) from error


def _recorded_revisions(connection: Any) -> list[str]:
    """The revisions Alembic recorded in the database (none for a new database)."""
    if not inspect(connection).has_table("alembic_version"):
        return []
    return list(connection.execute(text("SELECT version_num FROM alembic_version")).scalars())
