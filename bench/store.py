"""Persistence benchmark: appends, transcript builds and branching, each against a baseline.

    .venv/bin/python -m bench.store            # full run (well under a minute)
    .venv/bin/python -m bench.store --quick    # smoke run, a few seconds

Rows (SQLite always; PostgreSQL too when GATEWAY_TEST_DATABASE_URL is set, in a schema of its own
that is dropped afterwards):

- entries / events appended per second, in batches of 100, beside the raw driver doing the same
  work (JSON-encode each payload, bump a counter row, insert the batch with sqlite3 `executemany`
  under the store's pragmas or asyncpg `executemany`, one transaction per batch). The ratio is the
  store's share of the bare driver's speed.
- time to build the transcript of a 10,000-entry session beside a 100-entry one (expected: about
  linear in entries), and of 10,000 entries spread over a chain of 5 branches beside 10,000 in one
  session (expected: near 1, depth costs nothing extra).
- time to create a branch of a 10,000-entry transcript beside a 10-entry one (expected: near 1;
  nothing is copied).
- a run's context from the database: the time to read what the context of a 10,000-message
  conversation (a question, a 40-word answer, ...) is built from and build it
  (`Store.transcript.context_entries` then `sessions.context.build_context`, what a run does
  when its context is not cached), beside the raw driver reading the same rows (`sqlite3` or
  asyncpg, one SELECT) and the same build, both with the cyclic collector set as gatewayd sets
  it. The ratio is what the store's read adds.
- the journal (`bench._journal_load`): events/s through `Journal.append` with 100 sessions
  streaming at once, beside the raw driver storing the same events in batches of 1,000; and, beside
  one session streaming alone, the commit latency (append to publish) p50 / p99 and the events per
  commit.
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from agent_core import AssistantMessage, TextContent, UserMessage
from bench import _report
from bench._journal_load import RAW_BATCH, JournalLoad, journal_load, raw_postgres_rate, raw_sqlite_rate
from gateway.config.sections import GatewaySection
from sessions.context import build_context
from sessions.db import normalize_url
from sessions.ids import new_id
from sessions.records import ContextEntry
from sessions.store import NewEntry, NewEvent, Store, default_url

BATCH = 100
PAYLOAD = {"role": "assistant", "content": [{"type": "text", "text": "word " * 40}], "stopReason": "stop"}


class Row(_report.Row):
    """A row of this benchmark: its setting is the storage backend."""

    @property
    def backend(self) -> str:
        return self.setting


@dataclass(frozen=True)
class Sizes:
    batches: int
    repeats: int
    long: int
    journal_sessions: int = 100
    journal_deltas: int = 200
    """Deltas per session in the journal load; one session alone streams ten times as many."""


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _entries(count: int, prefix: str = "") -> list[NewEntry]:
    return [NewEntry("message", dict(PAYLOAD, n=f"{prefix}{i}")) for i in range(count)]


RawContextRead = Callable[[str], Awaitable[Sequence[Sequence[Any]]]]
"""The raw driver's read of a session's (id, kind, payload) rows in position order."""
CONTEXT_SQL = "SELECT id, kind, payload FROM entries WHERE session_id = {} ORDER BY position"


def _conversation(count: int) -> list[NewEntry]:
    """`count` messages of a conversation: a question, then a 40-word answer, and so on."""
    question = UserMessage(content=[TextContent(text="what next? " * 5)]).dump()
    answer = AssistantMessage(
        content=[TextContent(text="word " * 40)], api="bench", provider="bench", model="bench"
    ).dump()
    return [NewEntry("message", question if i % 2 == 0 else answer) for i in range(count)]


async def _timed(call: Callable[[], Awaitable[object]], repeats: int) -> float:
    """Median seconds of `repeats` calls (after one warm-up call)."""
    await call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def _append_rates(store: Store, batches: int) -> tuple[float, float]:
    session = await store.tree.create_session(agent_id="bench")
    start = time.perf_counter()
    for _ in range(batches):
        await store.transcript.append(session.id, _entries(BATCH))
    entries_rate = batches * BATCH / (time.perf_counter() - start)
    seq = 0
    start = time.perf_counter()
    for _ in range(batches):
        items = [NewEvent(seq + i + 1, "text_delta", {"delta": "word ", "i": i}) for i in range(BATCH)]
        await store.events.append(session.id, items)
        seq += BATCH
    events_rate = batches * BATCH / (time.perf_counter() - start)
    return entries_rate, events_rate


def _raw_sqlite_rates(path: Path, batches: int) -> tuple[float, float]:
    """The same inserts through the bare sqlite3 driver: the floor the store is built on."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON"):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute("CREATE TABLE counters (id TEXT PRIMARY KEY, last INTEGER NOT NULL)")
        conn.execute(
            "CREATE TABLE entries (id TEXT PRIMARY KEY, session_id TEXT, position INTEGER, kind TEXT, "
            "payload TEXT, created_at INTEGER, UNIQUE (session_id, position))"
        )
        conn.execute(
            "CREATE TABLE events (session_id TEXT, seq INTEGER, run_id TEXT, type TEXT, payload TEXT, "
            "created_at INTEGER, PRIMARY KEY (session_id, seq))"
        )
        conn.execute("INSERT INTO counters VALUES ('s', 0)")
        start = time.perf_counter()
        for b in range(batches):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE counters SET last = last + ? WHERE id = 's'", (BATCH,))
            rows = [
                (new_id(), "s", b * BATCH + i + 1, "message", _dumps(dict(PAYLOAD, n=i)), 0)
                for i in range(BATCH)
            ]
            conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        entries_rate = batches * BATCH / (time.perf_counter() - start)
        start = time.perf_counter()
        for b in range(batches):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE counters SET last = ? WHERE id = 's'", ((b + 1) * BATCH,))
            rows2 = [
                ("s", b * BATCH + i + 1, None, "text_delta", '{"delta":"word "}', 0) for i in range(BATCH)
            ]
            conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows2)
            conn.execute("COMMIT")
        events_rate = batches * BATCH / (time.perf_counter() - start)
    finally:
        conn.close()
    return entries_rate, events_rate


async def _raw_postgres_rates(url: str, batches: int) -> tuple[float, float]:
    """The same inserts through bare asyncpg, in a scratch schema."""
    parsed = make_url(normalize_url(url)[0].render_as_string(hide_password=False))
    schema = f"bench_raw_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(
        host=parsed.host,
        port=parsed.port,
        user=parsed.username,
        password=parsed.password,
        database=parsed.database,
    )
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'SET search_path TO "{schema}"')
        await conn.execute("CREATE TABLE counters (id TEXT PRIMARY KEY, last BIGINT NOT NULL)")
        await conn.execute(
            "CREATE TABLE entries (id VARCHAR(36) PRIMARY KEY, session_id VARCHAR(36), position INTEGER, "
            "kind VARCHAR(20), payload TEXT, created_at BIGINT, UNIQUE (session_id, position))"
        )
        await conn.execute(
            "CREATE TABLE events (session_id VARCHAR(36), seq BIGINT, run_id VARCHAR(100), "
            "type VARCHAR(100), payload TEXT, created_at BIGINT, PRIMARY KEY (session_id, seq))"
        )
        await conn.execute("INSERT INTO counters VALUES ('s', 0)")
        start = time.perf_counter()
        for b in range(batches):
            async with conn.transaction():
                await conn.execute("UPDATE counters SET last = last + $1 WHERE id = 's'", BATCH)
                rows = [
                    (new_id(), "s", b * BATCH + i + 1, "message", _dumps(dict(PAYLOAD, n=i)), 0)
                    for i in range(BATCH)
                ]
                await conn.executemany("INSERT INTO entries VALUES ($1, $2, $3, $4, $5, $6)", rows)
        entries_rate = batches * BATCH / (time.perf_counter() - start)
        start = time.perf_counter()
        for b in range(batches):
            async with conn.transaction():
                await conn.execute("UPDATE counters SET last = $1 WHERE id = 's'", (b + 1) * BATCH)
                rows2 = [
                    ("s", b * BATCH + i + 1, None, "text_delta", '{"delta":"word "}', 0) for i in range(BATCH)
                ]
                await conn.executemany("INSERT INTO events VALUES ($1, $2, $3, $4, $5, $6)", rows2)
        events_rate = batches * BATCH / (time.perf_counter() - start)
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
    return entries_rate, events_rate


async def _filled(store: Store, count: int) -> str:
    session = await store.tree.create_session(agent_id="bench")
    for start in range(0, count, 1000):
        await store.transcript.append(session.id, _entries(min(1000, count - start)))
    return session.id


async def _chain(store: Store, total: int, levels: int) -> str:
    """A chain of `levels` sessions, each a branch of the one before at its last entry, holding
    `total` entries between them."""
    session_id = await _filled(store, total // levels)
    for _ in range(levels - 1):
        session_id = (await store.tree.branch(session_id)).id
        for start in range(0, total // levels, 1000):
            await store.transcript.append(session_id, _entries(min(1000, total // levels - start)))
    return session_id


@contextmanager
def _collector_as_in_the_daemon() -> Iterator[None]:
    """The cyclic collector as gatewayd runs it: what exists so far frozen, the youngest generation
    collected every `[gateway] collector_young_threshold` allocations (its default). A context
    build allocates several objects per message; at Python's own threshold the collections it
    sets off would be most of what this row measures, which the daemon does not pay."""
    young = GatewaySection.model_fields["collector_young_threshold"].default
    saved = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, saved[1], saved[2])
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        gc.unfreeze()


async def _context_row(store: Store, backend: str, sizes: Sizes, raw_read: RawContextRead) -> Row:
    session = await store.tree.create_session(agent_id="bench")
    for start in range(0, sizes.long, 1000):
        await store.transcript.append(session.id, _conversation(min(1000, sizes.long - start)))

    async def ours() -> object:
        return build_context(await store.transcript.context_entries(session.id))

    async def bare() -> object:
        return build_context(list(map(ContextEntry._make, await raw_read(session.id))))

    with _collector_as_in_the_daemon():
        t_ours, t_bare = await _timed(ours, sizes.repeats), await _timed(bare, sizes.repeats)
    driver = "asyncpg" if backend == "postgresql" else "sqlite3"
    return Row(
        f"a run's context from the database, {sizes.long:,} messages",
        backend,
        t_ours * 1e3,
        "ms",
        f"raw {driver} SELECT + the same build",
        t_bare * 1e3,
    )


async def _rows_for(
    store: Store,
    backend: str,
    sizes: Sizes,
    raw: tuple[float, float],
    raw_name: str,
    raw_context: RawContextRead,
) -> list[Row]:
    entries_rate, events_rate = await _append_rates(store, sizes.batches)
    rows = [
        Row(f"entries appended/s (batch {BATCH})", backend, entries_rate, "/s", raw_name, raw[0]),
        Row(f"events appended/s (batch {BATCH})", backend, events_rate, "/s", raw_name, raw[1]),
    ]
    short, long = await _filled(store, 100), await _filled(store, sizes.long)
    chained = await _chain(store, sizes.long, 5)
    t_short = await _timed(lambda: store.transcript.read(short), sizes.repeats)
    t_long = await _timed(lambda: store.transcript.read(long), sizes.repeats)
    t_chain = await _timed(lambda: store.transcript.read(chained), sizes.repeats)
    rows.append(
        Row(
            f"transcript build, {sizes.long:,} entries",
            backend,
            t_long * 1e3,
            "ms",
            "100 entries",
            t_short * 1e3,
        )
    )
    rows.append(
        Row(
            f"transcript build, {sizes.long:,} entries over 5 branches",
            backend,
            t_chain * 1e3,
            "ms",
            f"{sizes.long:,} entries, 1 session",
            t_long * 1e3,
        )
    )
    rows.append(await _context_row(store, backend, sizes, raw_context))
    tiny = await _filled(store, 10)
    b_tiny = await _timed(lambda: store.tree.branch(tiny), sizes.repeats * 3)
    b_long = await _timed(lambda: store.tree.branch(chained), sizes.repeats * 3)
    rows.append(
        Row(
            f"branch creation, {sizes.long:,}-entry transcript",
            backend,
            b_long * 1e3,
            "ms",
            "10-entry transcript",
            b_tiny * 1e3,
        )
    )
    return rows


async def _journal_rows(
    store: Store, backend: str, sizes: Sizes, raw_rate: float, raw_name: str
) -> list[Row]:
    many = sizes.journal_sessions
    load = await journal_load(store, many, sizes.journal_deltas)
    alone: JournalLoad = await journal_load(store, 1, sizes.journal_deltas * 10)
    setting, one = f"{backend}, {many} sessions", "1 session"
    return [
        Row("journal events/s (group commit)", setting, load.rate, "/s", raw_name, raw_rate),
        Row("journal commit latency p50", setting, load.latency(0.5), "ms", one, alone.latency(0.5)),
        Row("journal commit latency p99", setting, load.latency(0.99), "ms", one, alone.latency(0.99)),
        Row("journal events per commit p50", setting, load.batch_p50, "events", one, alone.batch_p50),
    ]


async def _sqlite_rows(sizes: Sizes) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        home = Path(tmp)
        raw = _raw_sqlite_rates(home / "raw.db", sizes.batches)
        raw_journal = raw_sqlite_rate(home / "raw-journal.db", sizes.journal_sessions, sizes.journal_deltas)
        async with Store.open(default_url(home)) as store:
            reader = sqlite3.connect(home / "gateway.db")

            async def raw_context(session_id: str) -> Sequence[Sequence[Any]]:
                return reader.execute(CONTEXT_SQL.format("?"), (session_id,)).fetchall()

            try:
                rows = await _rows_for(store, "sqlite", sizes, raw, "raw sqlite3 executemany", raw_context)
            finally:
                reader.close()
            name = f"raw sqlite3 executemany, {RAW_BATCH:,}/batch"
            return rows + await _journal_rows(store, "sqlite", sizes, raw_journal, name)


async def _postgres_rows(url: str, sizes: Sizes) -> list[Row]:
    schema = f"bench_store_{uuid.uuid4().hex[:12]}"
    scoped = make_url(url).update_query_dict({"schema": schema}).render_as_string(hide_password=False)
    raw = await _raw_postgres_rates(url, sizes.batches)
    raw_journal = await _raw_postgres_journal_rate(url, sizes)
    try:
        async with Store.open(scoped) as store:
            reader = await _pg_connect(url)
            await reader.execute(f'SET search_path TO "{schema}"')

            async def raw_context(session_id: str) -> Sequence[Sequence[Any]]:
                return list(await reader.fetch(CONTEXT_SQL.format("$1"), session_id))

            try:
                rows = await _rows_for(
                    store, "postgresql", sizes, raw, "raw asyncpg executemany", raw_context
                )
            finally:
                await reader.close()
            name = f"raw asyncpg executemany, {RAW_BATCH:,}/batch"
            return rows + await _journal_rows(store, "postgresql", sizes, raw_journal, name)
    finally:
        conn = await _pg_connect(url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


async def _pg_connect(url: str) -> asyncpg.Connection:
    parsed = normalize_url(url)[0]
    return await asyncpg.connect(
        host=parsed.host,
        port=parsed.port,
        user=parsed.username,
        password=parsed.password,
        database=parsed.database,
    )


async def _raw_postgres_journal_rate(url: str, sizes: Sizes) -> float:
    schema = f"bench_raw_{uuid.uuid4().hex[:12]}"
    conn = await _pg_connect(url)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'SET search_path TO "{schema}"')
        return await raw_postgres_rate(conn, sizes.journal_sessions, sizes.journal_deltas)
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


def render(rows: Sequence[Row]) -> str:
    return _report.render(rows, setting_header="backend")


async def run(quick: bool) -> list[Row]:
    sizes = (
        Sizes(batches=10, repeats=3, long=10_000, journal_deltas=20)
        if quick
        else Sizes(batches=300, repeats=15, long=10_000)
    )
    rows = await _sqlite_rows(sizes)
    url = os.environ.get("GATEWAY_TEST_DATABASE_URL")
    if url:
        rows += await _postgres_rows(url, sizes)
    return rows


def main(argv: list[str] | None = None) -> None:
    _report.quick_main(
        argv,
        prog="python -m bench.store",
        doc=__doc__,
        quick_help="a fast smoke run with fewer samples",
        run=run,
        setting_header="backend",
    )


if __name__ == "__main__":
    main()
