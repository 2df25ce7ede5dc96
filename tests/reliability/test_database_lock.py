"""The SQLite file held by another process (`BEGIN EXCLUSIVE` for three seconds) while a run streams
and clients write. With `[database] busy_timeout_ms` short, writes answer a retryable UNAVAILABLE
promptly instead of hanging, reads keep working, the run in flight pauses and completes once the
lock clears, and nothing is half-written."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from gateway.client import CallError, GatewayClient
from tests.daemon import start_daemon
from tests.reliability._support import (
    assert_contiguous,
    connected,
    event_log,
    history,
    log_records,
    native,
    strip,
)

BUSY_TIMEOUT_MS = 200
HOLD_S = 3.0
LOCKER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("ROLLBACK")
print("released", flush=True)
"""


async def _refused_while_locked(client: GatewayClient, method: str, params: dict[str, Any]) -> float:
    """Call a write method during the lock: it must fail UNAVAILABLE (retryable) within the busy
    timeout plus slack. Returns the answer time in seconds."""
    started = time.monotonic()
    try:
        answer = await client.call(method, params, timeout=10)
    except CallError as exc:
        elapsed = time.monotonic() - started
        assert exc.code == "UNAVAILABLE" and exc.retryable and exc.retry_after_ms, exc.error
        assert "locked" in str(exc), exc.error
        return elapsed
    raise AssertionError(f"{method} succeeded while the database was locked: {answer}")


async def _retry(client: GatewayClient, method: str, params: dict[str, Any], *, within: float) -> Any:
    """What a well-behaved client does with UNAVAILABLE: wait `retryAfterMs` and try again."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await client.call(method, params, timeout=10)
        except CallError as exc:
            if exc.code != "UNAVAILABLE" or time.monotonic() > deadline:
                raise
            await asyncio.sleep((exc.retry_after_ms or 200) / 1000)


async def test_database_locked_by_another_process_answers_unavailable_then_recovers(
    gateway_home: Path,
) -> None:
    daemon = start_daemon(
        gateway_home,
        config=f"[database]\nbusy_timeout_ms = {BUSY_TIMEOUT_MS}\n",
        env={"GATEWAY_FAUX_PACE_MS": "10"},
    )
    streaming, late = "agent:main:streaming", "agent:main:late"
    try:
        async with connected(daemon) as client:
            await client.call("sessions.create", {"key": streaming})
            await client.call("sessions.events.subscribe", {"key": streaming, "afterSeq": 0})
            await client.call(
                "chat.send", {"sessionKey": streaming, "message": "!long 150", "idempotencyKey": "long"}
            )
            while True:  # lock only once the reply streams
                frame = await client.next_event(timeout=10)
                assert frame is not None
                event = native(frame)
                if event is not None and event["name"] == "message.delta":
                    break
            locker = await asyncio.create_subprocess_exec(
                sys.executable, "-c", LOCKER, str(gateway_home / "gateway.db"), str(HOLD_S),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert locker.stdout is not None
            assert (await asyncio.wait_for(locker.stdout.readline(), 10)).strip() == b"locked"
            locked_at = time.monotonic()

            answers = [
                await _refused_while_locked(
                    client,
                    "chat.send",
                    {"sessionKey": late, "message": "written later", "idempotencyKey": "late"},
                ),
                await _refused_while_locked(client, "sessions.create", {"key": "agent:main:created-later"}),
                await _refused_while_locked(client, "sessions.patch", {"key": streaming, "label": "renamed"}),
            ]
            assert max(answers) < BUSY_TIMEOUT_MS / 1000 + 1.5, answers
            # Reads are not blocked by a writer (WAL).
            await client.call("chat.history", {"sessionKey": streaming}, timeout=5)
            await client.call("sessions.list", {}, timeout=5)
            await client.call("status", timeout=5)
            assert time.monotonic() - locked_at < HOLD_S, "the calls above took longer than the lock"

            assert (await asyncio.wait_for(locker.stdout.readline(), 10)).strip() == b"released"
            assert await locker.wait() == 0

            # Once the lock clears, the same requests go through (the key was never recorded).
            sent = await _retry(
                client,
                "chat.send",
                {"sessionKey": late, "message": "written later", "idempotencyKey": "late"},
                within=10,
            )
            assert sent["status"] == "started", sent
            await _retry(client, "sessions.create", {"key": "agent:main:created-later"}, within=10)
            await _retry(client, "sessions.patch", {"key": streaming, "label": "renamed"}, within=10)
            for run_id in ("long", "late"):
                outcome = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 20_000}, timeout=30)
                assert outcome["status"] == "ok", outcome
            long_text = (await client.call("agent.wait", {"runId": "long", "timeoutMs": 1000}))["text"]
            assert long_text == " ".join(f"w{i}" for i in range(1, 151)), long_text

            # Nothing half-written: every event once and in order, transcript == log, one input each.
            for key in (streaming, late):
                log = await event_log(daemon, key)
                assert_contiguous(log, what=key)
                hist = await history(client, key)
                ids = [m["__gateway"]["id"] for m in hist["messages"]]
                assert ids == [e["messageId"] for e in log if e["name"] == "message.completed"], key
                users = [strip(m) for m in hist["messages"] if m["role"] == "user"]
                assert len(users) == 1, users
            row = await client.call("sessions.describe", {"key": streaming})
            assert row["label"] == "renamed" and row["status"] == "idle", row
    finally:
        daemon.stop()
    retried = [r for r in log_records(daemon) if r.get("event") == "journal commit failed, retrying"]
    assert retried, "the run's events were never held up by the lock (test did not exercise it)"
    with contextlib.closing(sqlite3.connect(gateway_home / "gateway.db")) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
