"""The journal under load, for `bench.store`: K sessions streaming deltas through `Journal.append`.

Each of K producers appends one `message.delta` per turn and yields (as an agent loop does between
deltas), `per_session` times. A recording publisher notes when each event is published, so the
load gives:

- throughput: events appended / time until the last one was published;
- commit latency: per event, published minus appended (the wait for the tick, the commit, and the
  queue ahead of it);
- batch size: events per commit (the store is wrapped to count them).

The raw baseline does the same durable work with the bare driver: encode each payload, bump each
session's `last_seq`, insert the events with one `executemany`, one transaction per batch of
`RAW_BATCH` events (SQLite under the store's pragmas; asyncpg on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench._report import median, percentile
from sessions.event_payloads import MessageDelta
from sessions.journal import Journal, JournalItem
from sessions.session_events import SessionEvent
from sessions.store import BatchItem, Store

RAW_BATCH = 1_000


@dataclass(frozen=True)
class JournalLoad:
    events: int
    seconds: float
    latencies_ms: list[float]
    batch_sizes: list[int]

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("nan")

    def latency(self, fraction: float) -> float:
        return percentile(self.latencies_ms, fraction)

    @property
    def batch_p50(self) -> float:
        return median([float(size) for size in self.batch_sizes])


class _Timed:
    """The publisher: when each (session, seq) was published."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, int], float] = {}

    def publish(self, event: SessionEvent) -> None:
        self.at[(event.session_id, event.seq)] = time.perf_counter()


class _Counted:
    """The store as the journal sees it, counting the events of each commit."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sizes: list[int] = []

    async def commit_batch(self, items: Sequence[BatchItem]) -> None:
        await self.store.commit_batch(items)
        self.sizes.append(sum(len(events) for _, _, events, _ in items))


def _delta(session_id: str, seq: int, key: str) -> SessionEvent:
    data = MessageDelta(message_id="m1", content_index=0, kind="text", delta=f"word{seq} ")
    return SessionEvent(session_id, seq, data, run_id="bench-run", session_key=key)


async def journal_load(store: Store, sessions: int, per_session: int) -> JournalLoad:
    """Stream `per_session` deltas from each of `sessions` new sessions through a journal."""
    keys = [f"agent:main:bench-{uuid.uuid4().hex[:8]}" for _ in range(sessions)]
    ids = [(await store.tree.create_session(agent_id="bench", key=key)).id for key in keys]
    published = _Timed()
    counted = _Counted(store)
    journal = Journal(counted, published)  # type: ignore[arg-type]
    await journal.start()
    appended: dict[tuple[str, int], float] = {}
    start = time.perf_counter()
    try:
        for seq in range(1, per_session + 1):
            for session_id, key in zip(ids, keys, strict=True):
                appended[(session_id, seq)] = time.perf_counter()
                await journal.append(JournalItem(session_id, events=[_delta(session_id, seq, key)]))
            await asyncio.sleep(0)
        await journal.flush()
    finally:
        await journal.aclose()
    last = max(published.at.values())
    latencies = [(published.at[k] - t) * 1e3 for k, t in appended.items()]
    return JournalLoad(len(appended), last - start, latencies, counted.sizes)


def _raw_rows(sessions: int, per_session: int) -> list[tuple[str, int, str | None, str, str, int]]:
    ids = [str(uuid.uuid4()) for _ in range(sessions)]
    return [
        (sid, seq, "bench-run", "message.delta", _payload(seq), 0)
        for seq in range(1, per_session + 1)
        for sid in ids
    ]


def _payload(seq: int) -> dict[str, object]:
    return {"messageId": "m1", "contentIndex": 0, "kind": "text", "delta": f"word{seq} ", "ts": 0}


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def raw_sqlite_rate(path: Path, sessions: int, per_session: int) -> float:
    """Events/s the bare sqlite3 driver stores doing the journal's durable work."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "foreign_keys = ON"):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute("CREATE TABLE counters (id TEXT PRIMARY KEY, last INTEGER NOT NULL)")
        conn.execute(
            "CREATE TABLE events (session_id TEXT, seq INTEGER, run_id TEXT, type TEXT, payload TEXT, "
            "created_at INTEGER, PRIMARY KEY (session_id, seq))"
        )
        rows = _raw_rows(sessions, per_session)
        conn.executemany("INSERT INTO counters VALUES (?, 0)", sorted({(r[0],) for r in rows}))
        start = time.perf_counter()
        for first in range(0, len(rows), RAW_BATCH):
            batch = rows[first : first + RAW_BATCH]
            last = {sid: seq for sid, seq, *_ in batch}
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("UPDATE counters SET last = ? WHERE id = ?", [(v, k) for k, v in last.items()])
            conn.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
                [(s, q, r, t, _dumps(p), c) for s, q, r, t, p, c in batch],
            )
            conn.execute("COMMIT")
        return len(rows) / (time.perf_counter() - start)
    finally:
        conn.close()


async def raw_postgres_rate(conn: asyncpg.Connection, sessions: int, per_session: int) -> float:
    """Events/s bare asyncpg stores doing the journal's durable work (in the connection's
    current schema, which the caller created and drops)."""
    await conn.execute("CREATE TABLE journal_counters (id TEXT PRIMARY KEY, last BIGINT NOT NULL)")
    await conn.execute(
        "CREATE TABLE journal_events (session_id VARCHAR(36), seq BIGINT, run_id VARCHAR(100), "
        "type VARCHAR(100), payload TEXT, created_at BIGINT, PRIMARY KEY (session_id, seq))"
    )
    rows = _raw_rows(sessions, per_session)
    await conn.executemany("INSERT INTO journal_counters VALUES ($1, 0)", sorted({(r[0],) for r in rows}))
    start = time.perf_counter()
    for first in range(0, len(rows), RAW_BATCH):
        batch = rows[first : first + RAW_BATCH]
        last = {sid: seq for sid, seq, *_ in batch}
        async with conn.transaction():
            await conn.executemany(
                "UPDATE journal_counters SET last = $1 WHERE id = $2", [(v, k) for k, v in last.items()]
            )
            await conn.executemany(
                "INSERT INTO journal_events VALUES ($1, $2, $3, $4, $5, $6)",
                [(s, q, r, t, _dumps(p), c) for s, q, r, t, p, c in batch],
            )
    return len(rows) / (time.perf_counter() - start)
