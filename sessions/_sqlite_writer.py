"""The store's direct SQLite write connection: a whole group commit in one go.

SQLAlchemy's async SQLite driver hands every statement to a thread of its own and waits for the
answer, each hand-off queueing for the GIL behind the event loop; a group commit of a thousand
events paid that a thousand times. This connection (the standard library's `sqlite3`) splits a
transaction where its costs are:

- the statements (typically one `executemany` per table) run on the event loop's thread. They
  are CPU work under the GIL: on another thread, every row would wait for the GIL again
  (`sqlite3` lets it go around each step), which is what made the old commits slow;
- the `COMMIT` runs on the writer's own thread. It is where SQLite writes the WAL and syncs it to
  disk (and, now and then, checkpoints): milliseconds of I/O without the GIL, during which the
  loop goes on serving everyone else. One hand-off per transaction.

Durability and locking are the store's: WAL, `synchronous=FULL`, foreign keys on, and every
transaction `BEGIN IMMEDIATE` under the database's write lock (which the SQLAlchemy writer takes
too, so the two never write at once), held until the commit has returned. The loop must never
sleep inside SQLite, so the connection's `busy_timeout` is 0: when another process holds the
database, `BEGIN IMMEDIATE` fails at once and is tried again after an asyncio sleep
(`sessions._sqlite_direct.LockWait`) until `busy_timeout_ms` has passed; then the locked error
leaves for the caller (the store makes it a retryable `StoreUnavailable`). Once `BEGIN IMMEDIATE` holds the
lock, no other writer can stop the statements or the commit (WAL). The connection is opened on
first use; it and the thread live until `close()`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

from sessions._sqlite_direct import LockWait, connect

__all__ = ["SqliteWriter"]

_PRAGMAS = (
    "PRAGMA busy_timeout = 0",
    "PRAGMA foreign_keys = ON",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
)


class SqliteWriter:
    """Transactions on one `sqlite3` connection to the file at `path`. The caller holds the
    database's write lock around `transaction` and translates the `sqlite3` errors it raises."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5_000) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_ms / 1000
        self._conn: sqlite3.Connection | None = None
        self._committer: ThreadPoolExecutor | None = None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[sqlite3.Connection]:
        """A `BEGIN IMMEDIATE` transaction on the connection (used on this thread: statements
        must be quick), committed on the writer's thread when the block ends. Roll back and
        re-raise when the block or the commit raises. Cancelled while committing, it still waits
        for the commit to end, so the caller's lock covers the whole transaction."""
        conn = await self._begin()
        try:
            yield conn
            await self._commit(conn)
        except BaseException:
            self._roll_back(conn)
            raise

    async def _begin(self) -> sqlite3.Connection:
        """The connection in a `BEGIN IMMEDIATE` transaction, waiting (without blocking the
        loop) up to `busy_timeout_ms` for another process's write lock."""
        wait = LockWait(self._busy_timeout_s)
        while True:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                return conn
            except sqlite3.OperationalError as error:
                await wait.after(error)

    def close(self) -> None:
        """Close the connection and stop the thread (a later transaction starts them again).
        Idempotent."""
        conn, self._conn = self._conn, None
        committer, self._committer = self._committer, None
        if committer is not None:
            committer.shutdown(wait=True)
        if conn is not None:
            conn.close()

    async def _commit(self, conn: sqlite3.Connection) -> None:
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-commit")
        done = asyncio.get_running_loop().run_in_executor(self._committer, conn.execute, "COMMIT")
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            # The connection is busy until the commit ends; nobody may touch it before.
            await asyncio.wait([done])
            raise

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            # The connection is unusable; the next transaction opens a new one.
            self.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect(self._path, _PRAGMAS)
        return self._conn
