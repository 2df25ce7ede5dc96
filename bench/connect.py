"""Connection storms: K clients with instance ids connecting at once, beside one client alone.

    .venv/bin/python -m bench.connect            # K = 1,000 against K = 1
    .venv/bin/python -m bench.connect --quick    # K = 100 against K = 1

Each configuration gets its own `gatewayd` (faux/echo, log level warning) in a temporary home,
the per-address quota of unauthenticated connections lifted above K. K clients (raw WebSocket
clients from `bench._wire`, in processes of at most 250) each open a connection and complete the
handshake as an OpenClaw UI does (`client.mode` `ui`, an `instanceId` of its own, no caps), all
at the same moment. Each client keeps the presence list it is shown: the `hello-ok` snapshot,
then every `presence` event (a full list replaces it; changes are applied by instance id).

Rows per K, each against K = 1 in this run:

- set-up time: from the moment the clients start connecting until the last `hello-ok` arrives;
- presence settled: until every client's list holds the K instances;
- presence bytes per client: what one client received in `presence` events meanwhile;
- daemon peak RSS (`VmHWM`, over its whole life: start, the storm, the presence updates).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench._daemon import HOST, gateway_daemon, peak_rss_bytes
from bench._report import Row, quick_main
from bench._wire import WireClient, WireError
from bench._workers import Workers

CLIENTS_PER_WORKER = 250
SETTLE_TIMEOUT_S = 120.0
JOIN_TIMEOUT_S = 60.0
"""A client that has no `hello-ok` this long after it started connecting counts as failed."""
_PRESENCE = b'{"type":"event","event":"presence"'


@dataclass(frozen=True)
class Outcome:
    setup_s: float
    settled_s: float
    presence_bytes: float
    peak_rss: float
    settled: bool
    failed: int


class Roster:
    """One client's presence list, by instance id."""

    def __init__(self, expected: int, on_settled: asyncio.Event) -> None:
        self.expected = expected
        self.on_settled = on_settled
        self.entries: dict[str, Any] = {}
        self.bytes = 0
        self.settled_at = 0.0
        self._early: list[bytes] | None = []
        """Presence events parsed before the `hello-ok` they follow was handled."""

    def snapshot(self, entries: list[dict[str, Any]], now: float) -> None:
        """The `hello-ok` snapshot, then the events that arrived with or after it."""
        self.entries = {str(e.get("instanceId")): e for e in entries}
        early, self._early = self._early or [], None
        for payload in early:
            self._apply(payload)
        self._check(now)

    def __call__(self, payload: bytes, now: float) -> None:
        if not payload.startswith(_PRESENCE):
            return
        self.bytes += len(payload)
        if self._early is not None:
            self._early.append(payload)
            return
        self._apply(payload)
        self._check(now)

    def _apply(self, payload: bytes) -> None:
        body = json.loads(payload)["payload"]
        if isinstance(body.get("presence"), list):
            self.entries = {str(e.get("instanceId")): e for e in body["presence"]}
            return
        for entry in body.get("upserted", []):
            self.entries[str(entry.get("instanceId"))] = entry
        for instance in body.get("removed", []):
            self.entries.pop(str(instance), None)

    def _check(self, now: float) -> None:
        if not self.settled_at and len(self.entries) >= self.expected:
            self.settled_at = now
            self.on_settled.set()


async def _join(client: WireClient, token: str, instance: str, roster: Roster) -> float:
    """The handshake of an OpenClaw UI; returns when `hello-ok` arrived."""
    challenge = json.loads(await client.recv())
    if challenge.get("event") != "connect.challenge":
        raise RuntimeError(f"expected connect.challenge, got {challenge.get('event')!r}")
    client.on_event = roster
    params = {
        "minProtocol": 4,
        "maxProtocol": 4,
        "client": {
            "id": "openclaw-control-ui",
            "version": "1",
            "platform": "linux",
            "mode": "ui",
            "instanceId": instance,
        },
        "role": "operator",
        "scopes": ["operator.read", "operator.write"],
        "caps": [],
        "auth": {"token": token},
    }
    hello = await client.request("connect", params, timeout=JOIN_TIMEOUT_S)
    now = time.monotonic()
    roster.snapshot(hello["snapshot"]["presence"], now)
    return now


async def _worker(spec: dict[str, Any]) -> None:
    """One client process: say `ready`, wait for a line on stdin, connect `count` clients at
    once, wait until each one's presence list holds `expected` instances (or the timeout), print
    one JSON line, wait for stdin to close."""
    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    settled = asyncio.Event()
    rosters = [Roster(spec["expected"], settled) for _ in range(spec["count"])]
    started = time.monotonic()

    async def one(i: int, roster: Roster) -> tuple[WireClient | None, float | None]:
        client: WireClient | None = None
        try:
            client = await WireClient.open(HOST, spec["port"], timeout=JOIN_TIMEOUT_S)
            return client, await _join(client, spec["token"], f"bench-{spec['first'] + i}", roster)
        except (OSError, WireError, TimeoutError):
            return client, None

    outcomes = await asyncio.gather(*(one(i, roster) for i, roster in enumerate(rosters)))
    clients = [client for client, _ in outcomes if client is not None]
    joined = [at for _, at in outcomes if at is not None]
    rosters = [roster for roster, (_, at) in zip(rosters, outcomes, strict=True) if at is not None]
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not all(r.settled_at for r in rosters) and time.monotonic() < deadline:
        settled.clear()
        try:
            await asyncio.wait_for(settled.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            break
    print(
        json.dumps(
            {
                "started": started,
                "failed": spec["count"] - len(joined),
                "joined": max(joined, default=float("nan")),
                "settled": max((r.settled_at for r in rosters), default=0.0),
                "all_settled": all(r.settled_at for r in rosters),
                "bytes": [r.bytes for r in rosters],
            }
        ),
        flush=True,
    )
    await loop.run_in_executor(None, sys.stdin.readline)
    for client in clients:
        client.close()


def _config(clients: int) -> str:
    return f"[gateway]\nmax_unauthenticated_per_address = {max(128, clients + 16)}\n"


def measure(clients: int) -> Outcome:
    with gateway_daemon(config=_config(clients)) as daemon:
        specs = [
            {
                "port": daemon.port,
                "token": daemon.token,
                "first": first,
                "count": min(CLIENTS_PER_WORKER, clients - first),
                "expected": clients,
            }
            for first in range(0, clients, CLIENTS_PER_WORKER)
        ]
        with Workers("bench.connect", specs) as workers:
            workers.ready("a client worker failed to start")
            results = workers.go()
            peak = peak_rss_bytes(daemon.pid)
    started = min(r["started"] for r in results)
    per_client = [b for r in results for b in r["bytes"]] or [0]
    return Outcome(
        setup_s=max(r["joined"] for r in results) - started,
        settled_s=max(r["settled"] for r in results) - started
        if all(r["all_settled"] for r in results)
        else float("nan"),
        presence_bytes=sum(per_client) / len(per_client),
        peak_rss=float(peak) / 2**20 if peak is not None else float("nan"),
        settled=all(r["all_settled"] for r in results),
        failed=sum(r["failed"] for r in results),
    )


async def _run(quick: bool) -> list[Row]:
    size = 100 if quick else 1000
    loop = asyncio.get_running_loop()
    base = await loop.run_in_executor(None, measure, 1)
    got = await loop.run_in_executor(None, measure, size)
    setting = f"K={size:,}"
    note = "" if got.settled and not got.failed else " [timed out]"
    failed = f" [{got.failed} failed]" if got.failed else ""
    return [
        Row(
            f"set-up time (last hello-ok){failed}",
            setting,
            got.setup_s * 1000,
            "ms",
            "K=1",
            base.setup_s * 1000,
        ),
        Row(f"presence settled{note}", setting, got.settled_s * 1000, "ms", "K=1", base.settled_s * 1000),
        Row(
            "presence bytes per client",
            setting,
            got.presence_bytes / 1000,
            "kB",
            "K=1",
            base.presence_bytes / 1000,
        ),
        Row("daemon peak RSS", setting, got.peak_rss, "MiB", "K=1", base.peak_rss),
    ]


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--worker"]:
        asyncio.run(_worker(json.loads(argv[1])))
        return
    quick_main(argv, prog="python -m bench.connect", doc=__doc__ or "", quick_help="K = 100", run=_run)


if __name__ == "__main__":
    main()
