"""Direct writes: one transaction on the database driver itself, for the store's hot writes.

Going through SQLAlchemy's async engine costs a few hundred microseconds per statement (SQLite:
several hand-offs to the driver's thread and back per statement, each waiting for the GIL), a
millisecond or more per transaction. The appends (`sessions._group_commit`) and the run records
(`sessions.run_log`) take `Database.write_direct()` instead, which hands them a `DirectWrite`:
plain SQL with `?` placeholders, run by

- SQLite: the store's direct `sqlite3` connection (`sessions._sqlite_writer`), statements on the
  event loop's thread (they never suspend), the commit on the writer's thread;
- PostgreSQL: the asyncpg driver of a pooled connection (placeholders become `$1`, `$2`, ...).

SQL here must be valid on both: INSERT/UPDATE/SELECT with `RETURNING`, no backend functions; the
one difference callers meet is a list parameter (`in_list`). Driver errors leave the block as the
store's (`sessions.db.translate`); `is_unique_violation` tells an id given twice from the rest
before that.

Many rows at once: `insert_many` and `update_many` take the table, its columns (`Col`: name and
type) and the rows. SQLite runs one prepared statement per row (`executemany`, all in C);
PostgreSQL gets one statement for all of them, the columns sent as arrays and taken apart by
`unnest`: the server parses, plans and starts one statement per table and batch instead of one
per row (asyncpg's `executemany` binds and executes each row on its own). `bench.cluster` shows
what PostgreSQL's processes then spend beside the nodes ("PostgreSQL's CPU in use").
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

__all__ = ["Col", "DirectWrite", "PostgresWrite", "SqliteWrite", "is_unique_violation"]

Row = tuple[Any, ...]


class Col(NamedTuple):
    """A column as `insert_many` and `update_many` write it: its name and its PostgreSQL type
    (`text` or `bigint`: an array of it carries the column's values; `text` fits varchar columns,
    `bigint` integer ones)."""

    name: str
    type: str


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

    async def insert_many(self, table: str, columns: Sequence[Col], rows: Sequence[Sequence[Any]]) -> None:
        """Insert `rows` (values in the order of `columns`) into `table`."""
        ...

    async def update_many(
        self, table: str, key: Col, columns: Sequence[Col], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Set `columns` of the rows of `table` whose `key` matches: each of `rows` is the new
        values in the order of `columns`, then the key."""
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

    async def insert_many(self, table: str, columns: Sequence[Col], rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(_insert_sql(table, tuple(columns), False), rows)

    async def update_many(
        self, table: str, key: Col, columns: Sequence[Col], rows: Sequence[Sequence[Any]]
    ) -> None:
        self._conn.executemany(_update_sql(table, key, tuple(columns), False), rows)

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

    async def insert_many(self, table: str, columns: Sequence[Col], rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            await self._conn.execute(_insert_sql(table, tuple(columns), True), *zip(*rows, strict=True))

    async def update_many(
        self, table: str, key: Col, columns: Sequence[Col], rows: Sequence[Sequence[Any]]
    ) -> None:
        if rows:
            await self._conn.execute(_update_sql(table, key, tuple(columns), True), *zip(*rows, strict=True))

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [tuple(record) for record in await self._conn.fetch(_numbered(sql), *params)]

    def in_list(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?::varchar[])", [list(values)]


@functools.lru_cache(maxsize=256)
def _numbered(sql: str) -> str:
    """`sql` with PostgreSQL's numbered placeholders instead of `?`."""
    parts = sql.split("?")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


def _unnest(columns: Sequence[Col]) -> str:
    """`unnest($1::text[], $2::bigint[], ...)`: one array parameter per column."""
    return f"unnest({', '.join(f'${n}::{c.type}[]' for n, c in enumerate(columns, 1))})"


@functools.lru_cache(maxsize=64)
def _insert_sql(table: str, columns: tuple[Col, ...], arrays: bool) -> str:
    """INSERT of one row of `?` values, or (`arrays`, PostgreSQL) of every row, one array a column."""
    names = ", ".join(c.name for c in columns)
    rows = f"SELECT * FROM {_unnest(columns)}" if arrays else f"VALUES ({', '.join('?' * len(columns))})"
    return f"INSERT INTO {table} ({names}) {rows}"


@functools.lru_cache(maxsize=64)
def _update_sql(table: str, key: Col, columns: tuple[Col, ...], arrays: bool) -> str:
    """UPDATE of the row whose `key` is the last `?`, or (`arrays`) of every row whose key is in
    the last array, each with the values at its index in the other arrays."""
    if not arrays:
        assignments = ", ".join(f"{c.name} = ?" for c in columns)
        return f"UPDATE {table} SET {assignments} WHERE {key.name} = ?"
    everything = (*columns, key)
    names = ", ".join(c.name for c in everything)
    assignments = ", ".join(f"{c.name} = v.{c.name}" for c in columns)
    return (
        f"UPDATE {table} SET {assignments} FROM {_unnest(everything)} AS v({names}) "
        f"WHERE {table}.{key.name} = v.{key.name}"
    )
