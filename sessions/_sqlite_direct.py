"""What the store's two direct `sqlite3` connections (`_sqlite_writer`, `_sqlite_reader`) share:
opening a connection with its pragmas, and waiting out another program's lock without blocking
the event loop.

Every connection of the store (these two and SQLAlchemy's, `sessions.db`) keeps at most
`PAGE_CACHE_KIB` of database pages (`CACHE_PRAGMA`; SQLite's own default is 2 MiB per
connection). The file's pages stay in the operating system's cache either way; SQLite's cache per
connection only spares a read call, and with eleven connections its default let the daemon's
memory grow by up to 22 MiB as the database grew past what the caches had seen.

Both connections run with `busy_timeout` 0 (the loop must never sleep inside SQLite). When
SQLite answers "locked" or "busy", `LockWait.after` sleeps in asyncio (5 ms, doubling up to
100 ms) and lets the caller try again, until `busy_timeout_ms` has passed since the first try;
then, or for any other error, the error is raised again.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CACHE_PRAGMA", "PAGE_CACHE_KIB", "LockWait", "connect"]

PAGE_CACHE_KIB = 256
CACHE_PRAGMA = f"PRAGMA cache_size = -{PAGE_CACHE_KIB}"
"""SQLite's page cache of one connection, in KiB (a negative `cache_size` counts KiB)."""

FIRST_RETRY_S = 0.005
MAX_RETRY_S = 0.100
_LOCKED_WORDS = ("locked", "busy")


def connect(path: Path, pragmas: Iterable[str]) -> sqlite3.Connection:
    """A connection to `path` in autocommit mode (transactions are the caller's), usable from any
    thread, with the page cache bound (`CACHE_PRAGMA`) and `pragmas` applied; closed again when
    one of them fails."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        for pragma in (CACHE_PRAGMA, *pragmas):
            conn.execute(pragma)
    except BaseException:
        conn.close()
        raise
    return conn


class LockWait:
    """The retries of one operation against another program's lock (see the module docstring)."""

    def __init__(self, busy_timeout_s: float) -> None:
        self._deadline = time.monotonic() + busy_timeout_s
        self._delay = FIRST_RETRY_S

    async def after(self, error: sqlite3.OperationalError) -> None:
        """Sleep before the next try when `error` is a lock and time is left; else raise it."""
        locked = any(word in str(error).lower() for word in _LOCKED_WORDS)
        if not locked or time.monotonic() + self._delay > self._deadline:
            raise error
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, MAX_RETRY_S)
