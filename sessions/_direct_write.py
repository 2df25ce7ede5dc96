"""Direct writes: one transaction on the database driver itself, for the store's hot writes.

Going through SQLAlchemy's async engine costs a few hundred microseconds per statement (SQLite:
several hand-offs to the driver's thread and back per statement, each waiting for the GIL), a
millisecond or more per transaction. The appends (`sessions._group_commit`) and the run records
(`sessions.run_log`) take `Database.write_direct()` instead, which hands them a `DirectWrite`:
plain SQL with `?` placeholders, run by

- SQLite: the store's direct `sqlite3` connection (`sessions._sqlite_writer`), statements on the
  event loop's thread (they never suspend), the commit on the writer's thread;
- PostgreSQL: the asyncpg driver of a pooled connection (placeholders become `$1`, `$2`, ...;
  `executemany` sends every row in one round trip).

SQL here must be valid on both: INSERT/UPDATE/SELECT with `RETURNING`, no backend functions; the
one difference callers meet is a list parameter (`in_list`). Driver errors leave the block as the
store's (`sessions.db.translate`); `is_unique_violation` tells an id given twice from the rest
before that.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["DirectWrite", "PostgresWrite", "SqliteWrite", "is_unique_violation"]

Row = tuple[Any, ...]

_UNIQUE_VIOLATION = "23505"


class DirectWrite(Protocol):
    """The statements of one direct write transaction (`Database.write_direct`)."""

    backend: str
    """`sqlite` or `postgresql`."""
    row_lock: str
    """Appended to a SELECT, keeps the rows it read locked until the transaction ends: ` FOR
    UPDATE` on PostgreSQL, nothing on SQLite (whose writer holds the whole database)."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return how many rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each of `rows`, all at once."""
        ...

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run a query (or a statement with RETURNING); return its rows."""
        ...

    def in_list(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """A condition that the text `column` holds one of `values`, and its parameters (SQLite
        takes the values one by one, PostgreSQL as one array)."""
        ...


def is_unique_violation(error: BaseException) -> bool:
    """Whether a driver error says a unique index refused a row (an id given twice)."""
    if isinstance(error, sqlite3.IntegrityError):
        return "UNIQUE" in str(error)
    return getattr(error, "sqlstate", None) == _UNIQUE_VIOLATION


class SqliteWrite:
    """A `DirectWrite` on a `sqlite3` connection inside the writer's transaction."""

    backend = "sqlite"
    row_lock = ""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    def in_list(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        return f"{column} IN ({', '.join('?' * len(values))})", list(values)


class PostgresWrite:
    """A `DirectWrite` on an asyncpg connection inside a transaction."""

    backend = "postgresql"
    row_lock = " FOR UPDATE"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        status: str = await self._conn.execute(_numbered(sql), *params)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._conn.executemany(_numbered(sql), rows)

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [tuple(record) for record in await self._conn.fetch(_numbered(sql), *params)]

    def in_list(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?::varchar[])", [list(values)]


@functools.lru_cache(maxsize=256)
def _numbered(sql: str) -> str:
    """`sql` with PostgreSQL's numbered placeholders instead of `?`."""
    parts = sql.split("?")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]
