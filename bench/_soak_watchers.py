"""The soak's watchers (`bench.soak`): clients that follow sessions with
`sessions.events.subscribe`, drop their connection now and then (a FIN without a close frame, or
a TCP reset) and resume from the last sessionSeq they saw, each checking that what arrives
continues exactly there (no gap, no repeat) and counting the runs it saw finish."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench._daemon import Daemon
from bench._wire import WireClient, WireError

__all__ = ["Watcher", "catch_up", "watch"]

NATIVE = b'{"type":"event","event":"session.'


@dataclass
class Watcher:
    index: int
    keys: list[str]
    last: dict[str, int] = field(default_factory=dict)
    """Session id -> last sessionSeq received."""
    ids: dict[str, str] = field(default_factory=dict)
    """Session key -> session id."""
    problems: list[str] = field(default_factory=list)
    finished_runs: Counter[str] = field(default_factory=Counter)
    received: int = 0
    reconnects: int = 0
    client: WireClient | None = None
    early: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Events of a session whose subscribe answer has not been read yet (the replay can arrive in
    the same read as the answer)."""

    def on_event(self, payload: bytes, _now: float) -> None:
        if not payload.startswith(NATIVE):
            return
        frame = json.loads(payload)
        body = frame.get("payload") or {}
        sid = body.get("sessionId")
        if not isinstance(body.get("sessionSeq"), int):
            return
        if sid not in self.last:
            self.early.setdefault(str(sid), []).append(frame)
            return
        self._take(frame)

    def _take(self, frame: dict[str, Any]) -> None:
        body = frame["payload"]
        sid, seq = body["sessionId"], body["sessionSeq"]
        if seq != self.last[sid] + 1:
            self.problems.append(f"watcher {self.index}: session {sid} seq {seq} after {self.last[sid]}")
        self.last[sid] = max(self.last[sid], seq)
        self.received += 1
        if frame["event"] == "session.agent.finished":
            self.finished_runs[f"{sid}/{body.get('runId')}"] += 1

    async def connect(self, daemon: Daemon) -> None:
        client = await WireClient.open(daemon.host, daemon.port)
        await client.gateway_connect(daemon.token)
        client.on_event = self.on_event
        self.client = client
        for key in self.keys:
            sid = self.ids.get(key)
            after = self.last.get(sid, 0) if sid is not None else 0
            answer = await client.request("sessions.events.subscribe", {"key": key, "afterSeq": after})
            if answer["replay"] != "exact":
                self.problems.append(f"watcher {self.index}: {key} replay {answer['replay']}")
            sid = answer["sessionId"]
            self.ids[key] = sid
            self.last.setdefault(sid, after)
            for frame in self.early.pop(sid, []):
                self._take(frame)

    def drop(self, rand: random.Random) -> None:
        client, self.client = self.client, None
        if client is None or client.transport is None:
            return
        if rand.random() < 0.5:
            client.transport.abort()
        else:
            client.close()


async def watch(daemon: Daemon, watcher: Watcher, stop: asyncio.Event, rand: random.Random) -> None:
    while not stop.is_set():
        try:
            await watcher.connect(daemon)
        except (OSError, WireError, TimeoutError) as exc:
            watcher.problems.append(f"watcher {watcher.index}: reconnect failed: {exc}")
            await asyncio.sleep(1)
            continue
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), rand.uniform(5, 30))
        watcher.drop(rand)
        watcher.reconnects += 1


async def catch_up(daemon: Daemon, watcher: Watcher, last_seqs: dict[str, int], timeout: float) -> None:
    """Resume one final time and wait until every followed session reached its last seq."""
    await watcher.connect(daemon)
    deadline = time.monotonic() + timeout
    try:
        while any(watcher.last.get(watcher.ids[k], 0) < last_seqs[k] for k in watcher.keys):
            if time.monotonic() > deadline:
                behind = [k for k in watcher.keys if watcher.last.get(watcher.ids[k], 0) < last_seqs[k]]
                watcher.problems.append(f"watcher {watcher.index}: never caught up on {behind}")
                return
            await asyncio.sleep(0.05)
    finally:
        watcher.drop(random.Random(0))
