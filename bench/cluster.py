"""Sessions over a cluster: the same load on one clustered node and on two, and events that cross
from the node that runs a session to clients on the other.

    .venv/bin/python -m bench.cluster            # K = 200 sessions (a few minutes)
    .venv/bin/python -m bench.cluster --quick    # K = 20, short replies

What it needs: PostgreSQL (`GATEWAY_BENCH_DATABASE_URL`, default
`postgresql+asyncpg://postgres@127.0.0.1:5432/test`) and Redis (`GATEWAY_BENCH_REDIS_URL`, default
`redis://127.0.0.1:6379/0`). When either does not answer it says so on stderr and exits with 2.

Each configuration is a cluster of its own: a new PostgreSQL schema (dropped afterwards), a new
Redis prefix, one token, and one or two `gatewayd` nodes (faux/echo, log level warning, `[runs]
max_concurrent` = K) on this machine. Two client processes hold K clients: client i connects to
node i mod N (N = 1 or 2), creates session i, subscribes to its events, and once every client is
ready sends `!long M` to it; the node that takes a session's first input owns it, so with two
nodes each runs half of the sessions. Every 5th session also has a watcher on the other node (on
the same node when there is one), which only subscribes: its events were committed by the owner,
crossed Redis, and went out from the other node's hub.

Configurations, in this order: one node and two at a realistic pace (`--pace-ms`, default 20 ms a
word, M = 50), then one node and two saturated (pace 0, M = 200). Rows, each beside one node in the
same run (the cross-node rows beside the watchers' counterparts on the owner node):

- event latency p50 / p99: receipt time minus the `ts` the owner stamped on the event (one wall
  clock; whole ms), for the events of the run (stamped after the message was sent);
- events lost + duplicated, per client against `lastSeq` from `sessions.describe`: must be 0;
- native events received/s by the K session clients, first receipt to last;
- saturated: events carried/s (the same count, pace 0), the nodes' CPU per event carried (user +
  system of all nodes from the send to the last receipt) and the cores that CPU time kept busy
  (CPU time over the first-to-last receipt span: on a machine whose cores the nodes share with
  PostgreSQL, Redis and the clients, what two nodes can add is bounded by the cores left idle),
  and the cores PostgreSQL (all its processes), Redis and the client workers kept busy from the
  release of the clients until their results were in (what shared the machine with the nodes);
- cross-node watcher latency p50 / p99 and loss, beside the same sessions' clients on the owner.

After the table: how many sessions each node owned (from `sessions.describe`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bench._daemon import HOST, Daemon, cpu_seconds, spawn, wait_listening
from bench._machine_cpu import others_cpu, spent
from bench._report import Row, percentile, render
from bench._wire import WireClient
from bench._workers import Workers
from bench.sessions import Follower
from sessions.db import normalize_url

DATABASE_URL = os.environ.get(
    "GATEWAY_BENCH_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("GATEWAY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
WORKERS = 2
WATCH_EVERY = 5
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Plan:
    sessions: int
    deltas: int
    pace_ms: float

    def setting(self, nodes: int) -> str:
        where = "1 node" if nodes == 1 else f"{nodes} nodes"
        return f"{where}, K={self.sessions:,}, M={self.deltas}, {self.pace_ms:g} ms/word"


@dataclass(frozen=True)
class Side:
    """What one group of clients saw: latencies of the run's events, loss and completion."""

    latencies_ms: list[float]
    lost: int
    duplicates: int
    complete: bool

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)


@dataclass(frozen=True)
class Outcome:
    clients: Side
    """The K session clients, each on the node that owns its session."""
    owner_watched: Side
    """Those of the K clients whose session also has a watcher."""
    watchers: Side
    """The watchers, on the other node."""
    events: int
    seconds: float
    cpu_s: float
    others_cpu_s: dict[str, float]
    """CPU seconds of what shares the machine with the nodes (PostgreSQL's processes, Redis, the
    client workers) from the release of the clients until their results were in."""
    others_wall_s: float
    """The wall time of that span."""
    owned: dict[str, int]

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("nan")


# --- client worker processes --------------------------------------------------------------------


def _key(index: int) -> str:
    return f"agent:main:bench-{index}"


async def _open(ports: list[int]) -> list[WireClient]:
    gate = asyncio.Semaphore(64)

    async def one(port: int) -> WireClient:
        async with gate:
            return await WireClient.open(HOST, port)

    return list(await asyncio.gather(*(one(p) for p in ports)))


async def _subscribe(client: WireClient, token: str, key: str, follower: Follower, create: bool) -> None:
    await client.gateway_connect(token)
    if create:
        await client.request("sessions.create", {"key": key})
    client.on_event = follower
    await client.request("sessions.events.subscribe", {"key": key})


def _side(followers: list[Follower], last_seqs: list[int], before: list[int]) -> dict[str, Any]:
    """Loss against `last_seqs`; latencies of the events after `before` (the seq each session had
    reached when the run was started: a subscription first replays what the log holds)."""
    lost = duplicates = 0
    for follower, last in zip(followers, last_seqs, strict=True):
        missing, repeated = follower.loss(last)
        lost += missing
        duplicates += repeated
    latencies = [
        round(latency, 3)
        for f, old in zip(followers, before, strict=True)
        for latency, seq in zip(f.latencies, f.seqs, strict=True)
        if seq > old
    ]
    return {
        "latencies": latencies,
        "lost": lost,
        "duplicates": duplicates,
        "complete": all(f.done for f in followers),
    }


async def _worker(spec: dict[str, Any]) -> None:
    """Clients of sessions [first, first + count) and their watchers: set up, say `ready`, wait for
    a line on stdin, send every session its message, follow until all are idle (or the timeout),
    print one JSON line."""
    ports: list[int] = spec["ports"]
    indices = list(range(spec["first"], spec["first"] + spec["count"]))
    watched = [i for i in indices if i % WATCH_EVERY == 0]
    finished = asyncio.Event()
    offset = time.time() - time.monotonic()
    owners = await _open([ports[i % len(ports)] for i in indices])
    watchers = await _open([ports[(i + 1) % len(ports)] for i in watched])
    owner_followers = [Follower(finished, offset) for _ in owners]
    watch_followers = [Follower(finished, offset) for _ in watchers]
    token = spec["token"]
    await asyncio.gather(
        *(
            _subscribe(c, token, _key(i), f, True)
            for c, i, f in zip(owners, indices, owner_followers, strict=True)
        )
    )
    await asyncio.gather(
        *(
            _subscribe(c, token, _key(i), f, False)
            for c, i, f in zip(watchers, watched, watch_followers, strict=True)
        )
    )
    described = await asyncio.gather(
        *(c.request("sessions.describe", {"key": _key(i)}) for c, i in zip(owners, indices, strict=True))
    )
    before = dict(zip(indices, (int(row["lastSeq"]) for row in described), strict=True))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    message = f"!long {spec['deltas']}"
    await asyncio.gather(
        *(
            c.request("chat.send", {"sessionKey": _key(i), "message": message, "idempotencyKey": f"run-{i}"})
            for c, i in zip(owners, indices, strict=True)
        )
    )
    everyone = owner_followers + watch_followers
    deadline = time.monotonic() + spec["timeout"]
    while not all(f.done for f in everyone) and time.monotonic() < deadline:
        finished.clear()
        try:
            await asyncio.wait_for(finished.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            break
    rows = await asyncio.gather(
        *(c.request("sessions.describe", {"key": _key(i)}) for c, i in zip(owners, indices, strict=True))
    )
    last_seqs = [int(row["lastSeq"]) for row in rows]
    last = dict(zip(indices, last_seqs, strict=True))
    owner_of = dict(zip(indices, owner_followers, strict=True))
    watched_last = [last[i] for i in watched]
    watched_before = [before[i] for i in watched]
    seen = [f for f in owner_followers if f.first]
    print(
        json.dumps(
            {
                "clients": _side(owner_followers, last_seqs, [before[i] for i in indices]),
                "owner_watched": _side([owner_of[i] for i in watched], watched_last, watched_before),
                "watchers": _side(watch_followers, watched_last, watched_before),
                "owners": [str(row["session"].get("ownerNode")) for row in rows],
                "events": sum(len(f.seqs) for f in owner_followers),
                "first": min((f.first for f in seen), default=0.0),
                "last": max((f.last for f in seen), default=0.0),
            }
        ),
        flush=True,
    )
    for client in owners + watchers:
        client.close()


# --- one cluster --------------------------------------------------------------------------------


def unavailable(database_url: str = DATABASE_URL, redis_url: str = REDIS_URL) -> str | None:
    """Why the benchmark cannot run here (PostgreSQL or Redis does not accept a connection), or
    None when both do."""
    database = make_url(database_url)
    redis = make_url(redis_url)
    for name, host, port in (
        ("PostgreSQL", database.host or "127.0.0.1", database.port or 5432),
        ("Redis", redis.host or "127.0.0.1", redis.port or 6379),
    ):
        try:
            with socket.create_connection((host, port), timeout=2):
                pass
        except OSError as exc:
            return f"{name} at {host}:{port} does not answer ({exc})"
    return None


def _config(plan: Plan, prefix: str) -> str:
    # Every client connects before any authenticates, all from loopback: lift the per-address
    # quota of unauthenticated connections above the clients.
    return (
        "[gateway]\n"
        f"max_unauthenticated_per_address = {max(128, 2 * plan.sessions + 16)}\n"
        "[runs]\n"
        f"max_concurrent = {plan.sessions}\n"
        f"max_live_sessions = {max(1000, plan.sessions)}\n"
        "[agent_defaults]\n"
        'model = "faux/echo"\n'
        "[cluster]\n"
        f'redis_prefix = "{prefix}"\n'
    )


async def _drop_schema(url: str, schema: str) -> None:
    engine = create_async_engine(normalize_url(url)[0])
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        await engine.dispose()


@contextmanager
def cluster(nodes: int, plan: Plan) -> Iterator[list[Daemon]]:
    """`nodes` running nodes of a new cluster (own schema, own Redis prefix, one token), stopped
    with SIGTERM and the schema dropped on exit."""
    run = uuid.uuid4().hex[:12]
    schema = f"bench_cluster_{run}"
    database = (
        make_url(DATABASE_URL).update_query_dict({"schema": schema}).render_as_string(hide_password=False)
    )
    token = secrets.token_urlsafe(24)
    daemons: list[Daemon] = []
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        try:
            for n in range(1, nodes + 1):
                home = Path(tmp) / f"node{n}"
                home.mkdir()
                env = {
                    "GATEWAY_DATABASE_URL": database,
                    "GATEWAY_REDIS_URL": REDIS_URL,
                    "GATEWAY_NODE_ID": f"node{n}",
                    "GATEWAY_FAUX_PACE_MS": str(plan.pace_ms),
                }
                daemons.append(spawn(home, env=env, config=_config(plan, f"bench-{run}"), token=token))
            for daemon in daemons:
                wait_listening(daemon, timeout=60.0)
            yield daemons
        finally:
            for daemon in daemons:
                code = daemon.stop()
                if code not in (0, -15):
                    print(f"warning: a node exited with {code}\n{daemon.logs()}", file=sys.stderr)
            asyncio.run(_drop_schema(DATABASE_URL, schema))


def _worker_specs(daemons: list[Daemon], plan: Plan) -> list[dict[str, Any]]:
    share = -(-plan.sessions // WORKERS)
    return [
        {
            "ports": [d.port for d in daemons],
            "token": daemons[0].token,
            "first": first,
            "count": min(share, plan.sessions - first),
            "deltas": plan.deltas,
            "timeout": RUN_TIMEOUT_S,
        }
        for first in range(0, plan.sessions, share)
    ]


def _merge(parts: list[dict[str, Any]]) -> Side:
    return Side(
        latencies_ms=[x for p in parts for x in p["latencies"]],
        lost=sum(p["lost"] for p in parts),
        duplicates=sum(p["duplicates"] for p in parts),
        complete=all(p["complete"] for p in parts),
    )


def measure(plan: Plan, nodes: int) -> Outcome:
    with cluster(nodes, plan) as daemons, Workers("bench.cluster", _worker_specs(daemons, plan)) as workers:
        workers.ready("a client worker failed to set up its sessions")
        cpu_before = sum(cpu_seconds(d.pid) for d in daemons)
        others_before = others_cpu(workers.pids)
        released = time.monotonic()
        results = workers.go()
        cpu_s = sum(cpu_seconds(d.pid) for d in daemons) - cpu_before
        others_after = others_cpu(workers.pids)
        others_wall_s = time.monotonic() - released
    seen = [r for r in results if r["events"]]
    owned: dict[str, int] = {}
    for owner in (o for r in results for o in r["owners"]):
        owned[owner] = owned.get(owner, 0) + 1
    return Outcome(
        clients=_merge([r["clients"] for r in results]),
        owner_watched=_merge([r["owner_watched"] for r in results]),
        watchers=_merge([r["watchers"] for r in results]),
        events=sum(r["events"] for r in results),
        seconds=max((r["last"] for r in seen), default=0.0) - min((r["first"] for r in seen), default=0.0),
        cpu_s=cpu_s,
        others_cpu_s=spent(others_before, others_after),
        others_wall_s=others_wall_s,
        owned=owned,
    )


# --- rows ---------------------------------------------------------------------------------------


def _note(*sides: Side) -> str:
    return "" if all(s.complete for s in sides) else " [timed out]"


def _paced_rows(plan: Plan, two: Outcome, one: Outcome) -> list[Row]:
    setting = plan.setting(2)
    note = _note(two.clients, two.watchers)
    base = "1 node"
    return [
        Row(f"event latency p50{note}", setting, two.clients.p50, "ms", base, one.clients.p50),
        Row(f"event latency p99{note}", setting, two.clients.p99, "ms", base, one.clients.p99),
        Row(
            "events lost + duplicated",
            setting,
            two.clients.lost + two.clients.duplicates,
            "",
            base,
            one.clients.lost + one.clients.duplicates,
        ),
        Row("native events received/s", setting, two.rate, "/s", base, one.rate),
    ]


def _saturated_rows(plan: Plan, two: Outcome, one: Outcome) -> list[Row]:
    setting = plan.setting(2)
    note = _note(two.clients, two.watchers)
    base = "1 node"
    per_event = [o.cpu_s / o.events * 1e6 if o.events else float("nan") for o in (two, one)]
    cores = [o.cpu_s / o.seconds if o.seconds > 0 else float("nan") for o in (two, one)]
    return [
        Row(f"events carried/s, saturated{note}", setting, two.rate, "/s", base, one.rate),
        Row("nodes' CPU per event carried", setting, per_event[0], "µs", base, per_event[1]),
        Row("nodes' CPU in use", setting, cores[0], "cores", base, cores[1]),
        *(
            Row(
                f"{name} CPU in use",
                setting,
                two.others_cpu_s[name] / two.others_wall_s,
                "cores",
                base,
                one.others_cpu_s[name] / one.others_wall_s,
            )
            for name in two.others_cpu_s
        ),
        Row(
            "events lost + duplicated",
            setting,
            two.clients.lost + two.clients.duplicates,
            "",
            base,
            one.clients.lost + one.clients.duplicates,
        ),
    ]


def _cross_rows(plan: Plan, two: Outcome) -> list[Row]:
    watched = -(-plan.sessions // WATCH_EVERY)
    setting = f"{plan.setting(2)}, {watched} watched"
    note = _note(two.watchers)
    base = "watcher on the owner"
    x, same = two.watchers, two.owner_watched
    return [
        Row(f"cross-node event latency p50{note}", setting, x.p50, "ms", base, same.p50),
        Row(f"cross-node event latency p99{note}", setting, x.p99, "ms", base, same.p99),
        Row(
            "cross-node events lost + duplicated",
            setting,
            x.lost + x.duplicates,
            "",
            base,
            same.lost + same.duplicates,
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="K = 20 with short replies")
    parser.add_argument("--sessions", type=int, help="K (default 200, quick 20)")
    parser.add_argument("--pace-ms", type=float, default=20.0, help="faux pace per word (default 20)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(_worker(json.loads(args.worker)))
        return
    problem = unavailable()
    if problem:
        print(f"bench.cluster needs PostgreSQL and Redis: {problem}", file=sys.stderr)
        raise SystemExit(2)
    sessions = args.sessions or (20 if args.quick else 200)
    paced = Plan(sessions, 10 if args.quick else 50, args.pace_ms)
    saturated = Plan(sessions, 100 if args.quick else 200, 0.0)
    started = time.perf_counter()
    paced_one, paced_two = measure(paced, 1), measure(paced, 2)
    saturated_one, saturated_two = measure(saturated, 1), measure(saturated, 2)
    rows = (
        _paced_rows(paced, paced_two, paced_one)
        + _saturated_rows(saturated, saturated_two, saturated_one)
        + _cross_rows(paced, paced_two)
    )
    print(render(rows))
    print()
    for name, outcome in (("paced", paced_two), ("saturated", saturated_two)):
        spread = ", ".join(f"{node} {count}" for node, count in sorted(outcome.owned.items()))
        print(f"sessions owned with 2 nodes, {name}: {spread}")
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
