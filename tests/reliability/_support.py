"""Helpers of the reliability tests: connecting to a real daemon, reading a session's durable
event log and transcript through the protocol, and watching the daemon process from outside.

Everything here talks to a daemon started with `tests.daemon.start_daemon` on loopback, and every
wait is bounded. The seed of every randomised test comes from `GATEWAY_RELIABILITY_SEED` (printed
by failing assertions), so a failure can be replayed exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from gateway.client import GatewayClient
from tests.daemon import Daemon

SEED = int(os.environ.get("GATEWAY_RELIABILITY_SEED", "20250611"))
READ_ONLY = ("operator.read",)


def rng(name: str) -> random.Random:
    """A random generator for one test, derived from the suite's seed."""
    return random.Random(f"{SEED}:{name}")


@contextlib.asynccontextmanager
async def connected(daemon: Daemon, **kwargs: Any) -> AsyncIterator[GatewayClient]:
    client = GatewayClient(daemon.url, token=kwargs.pop("token", daemon.token), **kwargs)
    await client.connect()
    try:
        yield client
    finally:
        await client.aclose()


# --- the daemon process -------------------------------------------------------------------------


def process(daemon: Daemon) -> psutil.Process:
    return psutil.Process(daemon.proc.pid)


def rss_bytes(daemon: Daemon) -> int:
    return int(process(daemon).memory_info().rss)


def open_fds(daemon: Daemon) -> int:
    return int(process(daemon).num_fds())


class RssSampler:
    """Samples the daemon's RSS every `interval` seconds in the background; `peak` is the highest
    value seen. Use as `async with`."""

    def __init__(self, daemon: Daemon, interval: float = 0.02) -> None:
        self._proc = process(daemon)
        self._interval = interval
        self.baseline = int(self._proc.memory_info().rss)
        self.peak = self.baseline
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, int(self._proc.memory_info().rss))
            await asyncio.sleep(self._interval)

    async def __aenter__(self) -> RssSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def log_records(daemon: Daemon) -> list[dict[str, Any]]:
    """The daemon's structured log lines (JSON lines on stderr) parsed; other lines skipped."""
    records = []
    if not daemon.err_path.exists():
        return records
    for line in daemon.err_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


async def wait_until(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def processes_with(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line contains `marker`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if marker in " ".join(proc.info["cmdline"] or ()):
            found.append(proc)
    return found


# --- sessions through the protocol --------------------------------------------------------------


def tool_message(name: str, args: dict[str, Any]) -> str:
    """A faux/echo directive that makes the model call tool `name` with `args`."""
    return f"!tool {name} {json.dumps(args)}"


def native(frame: dict[str, Any], session_id: str | None = None) -> dict[str, Any] | None:
    """The payload of a durable native session event (of `session_id` when given), else None."""
    name = str(frame.get("event") or "")
    payload = frame.get("payload")
    if not name.startswith("session.") or name == "session.snapshot" or not isinstance(payload, dict):
        return None
    if "sessionSeq" not in payload or (session_id is not None and payload.get("sessionId") != session_id):
        return None
    return {"name": name[len("session.") :], **payload}


async def event_log(daemon: Daemon, key: str, *, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Every durable event of the session `key`, read through `sessions.events.subscribe
    {afterSeq: 0}` on a fresh connection, up to the `lastSeq` the subscription answered."""
    async with connected(daemon) as client:
        answer = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
        assert answer["replay"] == "exact", answer
        last, sid = int(answer["lastSeq"]), answer["sessionId"]
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(events) < last or (events and events[-1]["sessionSeq"] < last):
            frame = await client.next_event(timeout=max(0.01, deadline - time.monotonic()))
            if frame is None:
                raise AssertionError(f"replay of {key} stopped at {len(events)} of {last} events")
            event = native(frame, sid)
            if event is not None and event["sessionSeq"] <= last:
                events.append(event)
        return events


def assert_contiguous(events: Iterable[dict[str, Any]], *, start: int = 1, what: str = "events") -> None:
    seqs = [int(e["sessionSeq"]) for e in events]
    expected = list(range(start, start + len(seqs)))
    assert seqs == expected, f"{what}: sessionSeqs are not contiguous from {start}: {seqs}"


def strip(message: dict[str, Any]) -> dict[str, Any]:
    """A transcript message without the gateway's bookkeeping field."""
    return {k: v for k, v in message.items() if k != "__gateway"}


async def history(client: GatewayClient, key: str) -> dict[str, Any]:
    answer: dict[str, Any] = await client.call("chat.history", {"sessionKey": key, "limit": 1000})
    assert not answer["hasMore"], "transcript longer than one page"
    return answer


def text_of(message: dict[str, Any]) -> str:
    return "".join(
        str(block.get("text", "")) for block in message.get("content") or () if block.get("type") == "text"
    )


@dataclass
class Follower:
    """A client's view of one session built only from the native events it received, the way
    a UI that resumes with `afterSeq` keeps it: the last seq seen and the committed messages."""

    key: str
    session_id: str = ""
    last_seq: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def take(self, event: dict[str, Any]) -> None:
        seq = int(event["sessionSeq"])
        assert seq == self.last_seq + 1, (
            f"{self.key}: received sessionSeq {seq} after {self.last_seq} (gap or duplicate)"
        )
        self.last_seq = seq
        self.events.append(event)
        if event["name"] == "message.completed":
            self.messages.append(event["message"])

    def feed(self, frames: Iterable[dict[str, Any]]) -> None:
        for frame in frames:
            event = native(frame, self.session_id)
            if event is not None:
                self.take(event)
