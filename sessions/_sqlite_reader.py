"""The store's direct SQLite read connection: point reads without a hand-off to another thread.

SQLAlchemy's async SQLite driver runs every statement on a thread of its own and waits for the
answer, each hand-off queueing for the GIL behind the event loop: a read of one session by its
key cost milliseconds of CPU, and every request and every run makes one. This connection (the
standard library's `sqlite3`, `query_only`) runs a read where it costs least, on the event loop's
thread: reading a few pages from the operating system's cache takes microseconds, and in WAL mode
a reader never waits for the writer. A deferred `BEGIN` makes the statements of one read one
snapshot; its `COMMIT` writes nothing.

The loop must never sleep inside SQLite, so `busy_timeout` is 0: in the rare moments SQLite
cannot start a read (another program recovering the WAL, a checkpoint that truncates it), the
read is tried again after an asyncio sleep until `busy_timeout_ms` has passed
(`sessions._sqlite_direct.LockWait`); then the locked error leaves for the caller. The
connection is opened on first use and lives until `close()`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from sessions._sqlite_direct import LockWait, connect

__all__ = ["SqliteReader"]

T = TypeVar("T")

_PRAGMAS = ("PRAGMA busy_timeout = 0", "PRAGMA query_only = ON")


class SqliteReader:
    """Read transactions on one `sqlite3` connection to the file at `path`. The caller
    translates the `sqlite3` errors `read` raises."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5_000) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_ms / 1000
        self._conn: sqlite3.Connection | None = None

    async def read(self, body: Callable[[sqlite3.Connection], Awaitable[T]]) -> T:
        """`body(connection)` inside one read transaction, again from the start when SQLite
        could not start the read (see the module docstring). `body` must not suspend."""
        wait = LockWait(self._busy_timeout_s)
        while True:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                try:
                    return await body(conn)
                finally:
                    conn.execute("COMMIT")
            except sqlite3.OperationalError as error:
                failed = error
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            await wait.after(failed)

    def close(self) -> None:
        """Close the connection (a later read opens a new one). Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect(self._path, _PRAGMAS)
        return self._conn
