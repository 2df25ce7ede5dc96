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
read is tried again after an asyncio sleep (5 ms, doubling up to 100 ms) until `busy_timeout_ms`
has passed; then the locked error leaves for the caller. The connection is opened on first use
and lives until `close()`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["SqliteReader"]

T = TypeVar("T")

_PRAGMAS = ("PRAGMA busy_timeout = 0", "PRAGMA query_only = ON")
_FIRST_RETRY_S = 0.005
_MAX_RETRY_S = 0.100
_LOCKED_WORDS = ("locked", "busy")


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
        deadline = time.monotonic() + self._busy_timeout_s
        delay = _FIRST_RETRY_S
        while True:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                try:
                    return await body(conn)
                finally:
                    conn.execute("COMMIT")
            except sqlite3.OperationalError as error:
                locked = any(word in str(error).lower() for word in _LOCKED_WORDS)
                if not locked or time.monotonic() + delay > deadline:
                    raise
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY_S)

    def close(self) -> None:
        """Close the connection (a later read opens a new one). Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            try:
                for pragma in _PRAGMAS:
                    conn.execute(pragma)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn
