"""Database engines, transactions, and the translation of driver errors.

`Database` owns the engines of one store and hands out transactions:

- SQLite (`aiosqlite`): WAL journal, `busy_timeout`, foreign keys on, `synchronous=FULL` (a
  committed entry survives a power cut). All writes go through ONE connection, serialised by an
  asyncio lock, in `BEGIN IMMEDIATE` transactions: the write lock is taken up front, so a write
  never fails half way on a lock upgrade. Reads use a small pool of `query_only` connections in
  deferred `BEGIN` transactions (a consistent snapshot across several statements; WAL lets them run
  beside the writer). The hot writes (appends of entries and events, the journal's group commits
  above all, and run records) take `write_direct()` instead: a direct `sqlite3` connection whose
  statements run on the loop's thread and whose commit runs on a thread of its own
  (`sessions._sqlite_writer`), under the same write lock. The hot point reads (a session by id
  or key: every request and every run makes one) take `read_direct()`: a `query_only` `sqlite3`
  connection read on the loop's thread (`sessions._sqlite_reader`). The database must be a file:
  an in-memory one could not be shared by the connections.
- PostgreSQL (`asyncpg`): one pooled engine by URL alone. A `?schema=NAME` query parameter (ours,
  not the driver's) keeps every table in that schema, created when missing. `write_direct()`
  uses a pooled connection's asyncpg driver directly: one round trip per statement, and so does
  `read_direct()`.

Every SQLAlchemy, driver and socket error raised inside `read()`, `write()`, `write_direct()` and
`read_direct()` leaves as a `sessions.errors` exception (see `translate`): a locked, busy or
unreachable database is a retryable `StoreUnavailable`, anything else a `StoreError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import Table, event, exc, text
from sqlalchemy.engine import URL, make_url

from sessions._async_engine import create_async_engine
from sessions._direct_write import DirectWrite, PostgresWrite, SqliteWrite
from sessions._sqlite_direct import CACHE_PRAGMA
from sessions._sqlite_reader import SqliteReader
from sessions._sqlite_writer import SqliteWriter
from sessions.errors import SessionsError, StoreClosed, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["Database", "default_url", "normalize_url", "translate"]

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_MS = 5_000
DEFAULT_WRITE_WAIT_MS = 30_000
_RETRY_LOCKED_MS = 500
_RETRY_UNREACHABLE_MS = 2_000

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# SQLite result codes that mean "someone else holds the lock", as words in the error text.
_SQLITE_BUSY_WORDS = ("database is locked", "database table is locked", "database is busy")
# PostgreSQL SQLSTATEs for which the same request may succeed later.
_PG_RETRYABLE_CLASSES = ("08", "53", "57")
_PG_RETRYABLE_CODES = {"40001", "40P01", "55P03"}


def default_url(home: Path) -> str:
    """The default database: the SQLite file `gateway.db` in the state directory `home`."""
    return f"sqlite+aiosqlite:///{(home / 'gateway.db').resolve()}"


def normalize_url(url: str) -> tuple[URL, str | None]:
    """Parse `url`, pick the async driver of its backend and take out our `schema` parameter.

    Raise StoreError for a backend we do not support or a malformed schema name.
    """
    try:
        parsed = make_url(url)
    except exc.ArgumentError as error:
        raise StoreError(f"not a database URL: {error}") from error
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite"), None
    if backend in ("postgresql", "postgres"):
        schema = parsed.query.get("schema")
        if isinstance(schema, tuple):
            raise StoreError("the database URL names more than one schema")
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise StoreError(f"invalid schema name {schema!r} in the database URL")
        return parsed.set(drivername="postgresql+asyncpg").difference_update_query(["schema"]), schema
    raise StoreError(f"unsupported database backend {backend!r}; use sqlite or postgresql")


def translate(error: BaseException, *, retry_after_ms: int = _RETRY_LOCKED_MS) -> SessionsError:
    """The `sessions.errors` exception for a database, driver or socket error."""
    if isinstance(error, SessionsError):
        return error
    if isinstance(error, exc.TimeoutError):
        return StoreUnavailable("no database connection is free", retry_after_ms=retry_after_ms)
    if isinstance(error, TimeoutError):
        return StoreUnavailable("timed out waiting for the database writer", retry_after_ms=retry_after_ms)
    if isinstance(error, exc.DBAPIError):
        return _translate_dbapi(error, retry_after_ms)
    if isinstance(error, sqlite3.Error) or _is_asyncpg_error(error):
        return _translate_driver(error, retry_after_ms, interface=_is_asyncpg_interface_error(error))
    if isinstance(error, OSError):
        return StoreUnavailable(f"database unreachable: {error}", retry_after_ms=_RETRY_UNREACHABLE_MS)
    if isinstance(error, exc.SQLAlchemyError):
        return StoreError(f"database error: {error}")
    return StoreError(f"database error: {type(error).__name__}: {error}")


def _translate_dbapi(error: exc.DBAPIError, retry_after_ms: int) -> SessionsError:
    orig = error.orig
    if error.connection_invalidated:
        detail = str(orig) if orig is not None else str(error)
        return StoreUnavailable(f"database connection lost: {detail}", retry_after_ms=_RETRY_UNREACHABLE_MS)
    interface = isinstance(error, exc.InterfaceError)
    return _translate_driver(orig if orig is not None else error, retry_after_ms, interface=interface)


def _is_asyncpg_error(error: BaseException) -> bool:
    # By module, so that a daemon on SQLite never imports asyncpg to ask.
    return type(error).__module__.startswith("asyncpg")


def _is_asyncpg_interface_error(error: BaseException) -> bool:
    """asyncpg's errors of the client side of a connection (closed, broken, misused)."""
    return _is_asyncpg_error(error) and any(cls.__name__ == "InterfaceError" for cls in type(error).__mro__)


def _translate_driver(orig: BaseException, retry_after_ms: int, *, interface: bool) -> SessionsError:
    """The store's error for a driver's (`orig`); `interface`: an error of the client side of
    the connection rather than of the database."""
    detail = str(orig)
    if any(word in detail.lower() for word in _SQLITE_BUSY_WORDS):
        return StoreUnavailable(f"database is locked: {detail}", retry_after_ms=retry_after_ms)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and (
        sqlstate in _PG_RETRYABLE_CODES or sqlstate[:2] in _PG_RETRYABLE_CLASSES
    ):
        return StoreUnavailable(f"database busy or unreachable: {detail}", retry_after_ms=retry_after_ms)
    if isinstance(orig, OSError) or (sqlstate is None and interface):
        return StoreUnavailable(f"database unreachable: {detail}", retry_after_ms=_RETRY_UNREACHABLE_MS)
    return StoreError(f"database error: {detail}")


class Fence(Protocol):
    """Checks a session row a commit is about to write (owner node and fencing token, read under
    the commit's row lock); raises `Fenced` when the row is no longer this node's."""

    def check(self, session_id: str, owner: str | None, token: int) -> None: ...


class Database:
    """The engines of one store. Use `open()`; close with `aclose()` (idempotent)."""

    def __init__(
        self,
        url: URL,
        *,
        schema: str | None,
        writer: AsyncEngine,
        reader: AsyncEngine,
        write_lock: asyncio.Lock | None,
        read_lock: asyncio.Lock | None,
        write_wait_ms: int,
        retry_after_ms: int,
        direct: SqliteWriter | None = None,
        direct_reader: SqliteReader | None = None,
    ) -> None:
        self.url = url
        self.schema = schema
        self.backend = url.get_backend_name()
        self._writer = writer
        self._reader = reader
        self._write_lock = write_lock
        self._read_lock = read_lock
        self._write_wait_s = write_wait_ms / 1000
        self.retry_after_ms = retry_after_ms
        self._direct = direct
        self._direct_reader = direct_reader
        self._closed = False
        self.fence: Fence | None = None
        """In a cluster, what every group commit checks each session row it writes against
        (`sessions.ownership.Ownership.check`); None on one node."""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        write_wait_ms: int = DEFAULT_WRITE_WAIT_MS,
        idle_transaction_timeout_ms: int | None = None,
    ) -> Database:
        """Create the engines for `url` (no connection is made yet).

        `busy_timeout_ms` is how long SQLite waits for another process's lock before a statement
        fails with StoreUnavailable; `write_wait_ms` how long a write waits for this store's own
        writer. `idle_transaction_timeout_ms` (PostgreSQL): the server ends a connection of ours
        that sits inside a transaction this long (a cluster node paused mid-commit must not hold
        its row locks past its lease). Raise StoreError for an unsupported URL or an in-memory
        SQLite database.
        """
        parsed, schema = normalize_url(url)
        retry = max(50, min(busy_timeout_ms, _RETRY_LOCKED_MS))
        if parsed.get_backend_name() == "postgresql":
            engine = _postgres_engine(parsed, schema, idle_transaction_timeout_ms)
            return cls(
                parsed,
                schema=schema,
                writer=engine,
                reader=engine,
                write_lock=None,
                read_lock=None,
                write_wait_ms=write_wait_ms,
                retry_after_ms=retry,
            )
        if parsed.database in (None, "", ":memory:"):
            raise StoreError("an in-memory SQLite database is not supported; name a database file")
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        writer = _sqlite_engine(parsed, busy_timeout_ms, role="writer", pool_size=1, max_overflow=0)
        reader = _sqlite_engine(parsed, busy_timeout_ms, role="reader", pool_size=4, max_overflow=4)
        return cls(
            parsed,
            schema=None,
            writer=writer,
            reader=reader,
            write_lock=asyncio.Lock(),
            read_lock=None,
            write_wait_ms=write_wait_ms,
            retry_after_ms=retry,
            direct=SqliteWriter(Path(parsed.database), busy_timeout_ms=busy_timeout_ms),
            direct_reader=SqliteReader(Path(parsed.database), busy_timeout_ms=busy_timeout_ms),
        )

    @property
    def engines(self) -> tuple[AsyncEngine, ...]:
        """The distinct engines (for instrumentation: SQL event listeners, pool statistics)."""
        return (self._writer,) if self._reader is self._writer else (self._writer, self._reader)

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file, or None (PostgreSQL)."""
        if self.backend != "sqlite" or self.url.database in (None, "", ":memory:"):
            return None
        return Path(str(self.url.database))

    def insert(self, table: Table) -> sqlite.Insert | postgresql.Insert:
        """An INSERT into `table` that can carry an ON CONFLICT clause on this backend."""
        # The dialect modules are imported here: a daemon on SQLite never loads PostgreSQL's.
        if self.backend == "postgresql":
            from sqlalchemy.dialects import postgresql

            return postgresql.insert(table)
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    def write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A write transaction, committed when the block ends without an exception."""
        return self._transaction(self._writer, self._write_lock)

    def read(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A read-only transaction (SQLite: one snapshot for every statement in the block)."""
        return self._transaction(self._reader, self._read_lock)

    @asynccontextmanager
    async def write_direct(self) -> AsyncIterator[DirectWrite]:
        """A write transaction on the driver itself (see `sessions._direct_write`), committed
        when the block ends without an exception. SQLite: on the direct connection, under the
        write lock; a database another process holds is waited for up to `busy_timeout_ms`
        (asyncio sleeps between tries), then StoreUnavailable. PostgreSQL: on a pooled
        connection's asyncpg driver."""
        self._check_open()
        try:
            writer = self._direct
            if writer is not None:
                async with self._locked(self._write_lock, self._write_wait_s), writer.transaction() as conn:
                    yield SqliteWrite(conn)
                return
            async with self._writer.connect() as pooled:
                driver: Any = (await pooled.get_raw_connection()).driver_connection
                try:
                    async with driver.transaction():
                        yield PostgresWrite(driver)
                except BaseException as error:
                    if _is_asyncpg_interface_error(error) or isinstance(error, OSError):
                        await pooled.invalidate()  # broken: the pool must not hand it out again
                    raise
        except BaseException as error:
            translated = self._translated(error)
            if translated is error:
                raise
            raise translated from error

    async def read_direct(self, body: Callable[[DirectWrite], Awaitable[T]]) -> T:
        """`body(reader)` in a read transaction on the driver itself, for point reads (only
        `fetch` may be used, and `body` must not await anything else). SQLite: on the direct
        read connection, on the loop's thread, tried again while SQLite cannot start a read (up
        to `busy_timeout_ms`); PostgreSQL: a pooled connection's asyncpg driver, one round trip
        per statement."""
        self._check_open()
        try:
            reader = self._direct_reader
            if reader is not None:
                return await reader.read(lambda conn: body(SqliteWrite(conn)))
            async with self._reader.connect() as pooled:
                driver: Any = (await pooled.get_raw_connection()).driver_connection
                return await body(PostgresWrite(driver))
        except BaseException as error:
            translated = self._translated(error)
            if translated is error:
                raise
            raise translated from error

    @asynccontextmanager
    async def _transaction(
        self, engine: AsyncEngine, lock: asyncio.Lock | None
    ) -> AsyncIterator[AsyncConnection]:
        """A transaction on `engine` under `lock`, its errors translated to the store's."""
        self._check_open()
        try:
            async with self._locked(lock, self._write_wait_s), engine.begin() as conn:
                yield conn
        except BaseException as error:
            translated = self._translated(error)
            if translated is error:
                raise
            raise translated from error

    async def migrate(self, upgrade: Callable[[Any], None]) -> None:
        """Run `upgrade(sync_connection)` in one write transaction, alone among migrators.

        On PostgreSQL the schema is created when missing and a transaction-scoped advisory lock
        keeps two processes from migrating the same schema at once.
        """
        async with self.write() as conn:
            if self.backend == "postgresql":
                name = self.schema or "public"
                digest = hashlib.blake2b(f"agent-gateway:migrate:{name}".encode(), digest_size=8).digest()
                key = int.from_bytes(digest, "big", signed=True)
                await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
                if self.schema is not None:
                    found = await conn.execute(
                        text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": self.schema}
                    )
                    if found.first() is None:
                        await conn.execute(text(f'CREATE SCHEMA "{self.schema}"'))
            await conn.run_sync(upgrade)

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._direct is not None:
            self._direct.close()
        if self._direct_reader is not None:
            self._direct_reader.close()
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    def _translated(self, error: BaseException) -> BaseException:
        if isinstance(error, SessionsError | asyncio.CancelledError) or not isinstance(error, Exception):
            return error
        if not isinstance(error, exc.SQLAlchemyError | sqlite3.Error | OSError | TimeoutError) and not (
            _is_asyncpg_error(error)
        ):
            return error
        return translate(error, retry_after_ms=self.retry_after_ms)

    @staticmethod
    @asynccontextmanager
    async def _locked(lock: asyncio.Lock | None, wait_s: float) -> AsyncIterator[None]:
        if lock is None:
            yield
            return
        async with asyncio.timeout(wait_s):
            await lock.acquire()
        try:
            yield
        finally:
            lock.release()


def _postgres_engine(url: URL, schema: str | None, idle_transaction_timeout_ms: int | None) -> AsyncEngine:
    # `application_name` names our connections in `pg_stat_activity` (with the schema, when
    # several gateways share one database).
    settings = {"application_name": f"agent-gateway/{schema}" if schema else "agent-gateway"}
    if schema is not None:
        settings["search_path"] = schema
    if idle_transaction_timeout_ms is not None:
        settings["idle_in_transaction_session_timeout"] = str(idle_transaction_timeout_ms)
    connect_args: dict[str, Any] = {"server_settings": settings}
    return create_async_engine(
        url, pool_size=5, max_overflow=10, pool_pre_ping=True, connect_args=connect_args
    )


def _sqlite_engine(url: URL, busy_timeout_ms: int, *, role: str, **pool: Any) -> AsyncEngine:
    # Connections are only used inside `begin()` blocks, which always end their transaction, so
    # the pool's extra ROLLBACK on every check-in would be a wasted round trip to the driver thread.
    engine = create_async_engine(url, pool_reset_on_return=None, **pool)
    pragmas = [CACHE_PRAGMA, f"PRAGMA busy_timeout = {int(busy_timeout_ms)}", "PRAGMA foreign_keys = ON"]
    if role == "writer":
        pragmas += ["PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL"]
    else:
        pragmas += ["PRAGMA query_only = ON"]
    begin = "BEGIN" if role == "reader" else "BEGIN IMMEDIATE"

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module (which skips it before SELECT and DDL) and issue
        # our own below, so every transaction is real and a writer takes its lock up front.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in pragmas:
                cursor.execute(pragma)
        finally:
            cursor.close()

    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)
    return engine
