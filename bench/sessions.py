"""Many sessions at once: K sessions streaming from faux together, one client each, beside K = 1.

    .venv/bin/python -m bench.sessions            # K = 100 and 1,000 against K = 1 (a minute or so)
    .venv/bin/python -m bench.sessions --quick    # K = 50 against K = 1, a few seconds
    .venv/bin/python -m bench.sessions --pace-ms 0 --deltas 200   # saturate instead
    .venv/bin/python -m bench.sessions --profile DIR              # cProfile each daemon into DIR

Each configuration gets its own `gatewayd` (faux/echo, log level warning, `[runs] max_concurrent`
= K) in a temporary home. K clients (raw WebSocket clients from `bench._wire`, spread over client
processes of 250) each create a session, call `sessions.events.subscribe {key}`, and once all are
ready each sends `!long M` to its own session at the same moment. The faux model paces its words
at `--pace-ms` (default 20 ms, about 50 tokens/s, a brisk real model), so the load is K streams at
a realistic speed rather than as fast as the daemon can go.

Rows per K, each against the same measurement with K = 1 in this run:

- end-to-end event latency p50 / p99: for every native `session.*` frame, its receipt time minus
  the `ts` the session stamped on the event when it numbered it (the wall clock of the same
  machine, so no offset; `ts` is whole milliseconds, so values carry up to 1 ms of truncation).
  It covers the journal commit, rendering, fan-out and the socket.
- events lost: per client, sessionSeqs missing from 1..lastSeq (lastSeq from
  `sessions.describe` after the run), plus duplicates. Must be 0.
- peak RSS of the daemon (`VmHWM`, over its whole life: start, connections and the run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._daemon import HOST, gateway_daemon, peak_rss_bytes
from bench._report import Row, percentile, render
from bench._wire import WireClient, open_many

NATIVE_PREFIX = b'{"type":"event","event":"session.'
END_PREFIX = b'{"type":"event","event":"session.status.changed"'
CLIENTS_PER_WORKER = 250
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Plan:
    sessions: int
    deltas: int
    pace_ms: float


@dataclass(frozen=True)
class Outcome:
    latencies_ms: list[float]
    lost: int
    duplicates: int
    complete: bool
    events: int
    seconds: float
    peak_rss: float

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)


# --- client worker processes --------------------------------------------------------------------


class Follower:
    """One client's view of its session: native events' seqs and latencies."""

    __slots__ = ("clock_offset", "done", "first", "last", "latencies", "on_done", "seqs")

    def __init__(self, on_done: asyncio.Event, clock_offset: float) -> None:
        self.on_done = on_done
        self.clock_offset = clock_offset  # wall clock - monotonic clock, in seconds
        self.seqs: list[int] = []
        self.latencies: list[float] = []
        self.first = 0.0
        self.last = 0.0
        self.done = False

    def __call__(self, payload: bytes, now: float) -> None:
        if not payload.startswith(NATIVE_PREFIX):
            return
        event = json.loads(payload)["payload"]
        self.latencies.append((now + self.clock_offset) * 1000 - event["ts"])
        self.seqs.append(event["sessionSeq"])
        if not self.first:
            self.first = now
        self.last = now
        if payload.startswith(END_PREFIX) and event.get("status") == "idle":
            self.done = True
            self.on_done.set()

    def loss(self, last_seq: int) -> tuple[int, int]:
        """(seqs missing from 1..last_seq, duplicate deliveries)."""
        seen = set(self.seqs)
        missing = sum(1 for seq in range(1, last_seq + 1) if seq not in seen)
        return missing, len(self.seqs) - len(seen)


async def _follow(client: WireClient, token: str, key: str, follower: Follower) -> None:
    await client.gateway_connect(token)
    await client.request("sessions.create", {"key": key})
    client.on_event = follower
    await client.request("sessions.events.subscribe", {"key": key})


async def _worker(spec: dict[str, Any]) -> None:
    """One client process for sessions [first, first + count): set up, say `ready`, wait for a
    line on stdin, send every session its message at once, follow until all are idle (or the
    timeout), print one JSON line."""
    clients = await open_many(HOST, spec["port"], spec["count"])
    finished = asyncio.Event()
    offset = time.time() - time.monotonic()
    followers = [Follower(finished, offset) for _ in clients]
    keys = [f"agent:main:bench-{spec['first'] + i}" for i in range(len(clients))]
    await asyncio.gather(
        *(_follow(c, spec["token"], k, f) for c, k, f in zip(clients, keys, followers, strict=True))
    )
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    message = f"!long {spec['deltas']}"
    await asyncio.gather(
        *(
            c.request("chat.send", {"sessionKey": k, "message": message, "idempotencyKey": f"run-{k}"})
            for c, k in zip(clients, keys, strict=True)
        )
    )
    deadline = time.monotonic() + spec["timeout"]
    while not all(f.done for f in followers) and time.monotonic() < deadline:
        finished.clear()
        try:
            await asyncio.wait_for(finished.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            break
    rows = await asyncio.gather(
        *(c.request("sessions.describe", {"key": k}) for c, k in zip(clients, keys, strict=True))
    )
    lost = duplicates = 0
    for follower, row in zip(followers, rows, strict=True):
        missing, repeated = follower.loss(int(row["lastSeq"]))
        lost += missing
        duplicates += repeated
    seen = [f for f in followers if f.first]
    print(
        json.dumps(
            {
                "latencies": [round(x, 3) for f in followers for x in f.latencies],
                "lost": lost,
                "duplicates": duplicates,
                "done": sum(1 for f in followers if f.done),
                "events": sum(len(f.seqs) for f in followers),
                "first": min((f.first for f in seen), default=0.0),
                "last": max((f.last for f in seen), default=0.0),
            }
        ),
        flush=True,
    )
    for client in clients:
        client.close()


# --- one configuration --------------------------------------------------------------------------


def _config(plan: Plan) -> str:
    # Every client connects before any authenticates, all from loopback: lift the per-address
    # quota of unauthenticated connections above K.
    return (
        "[gateway]\n"
        f"max_unauthenticated_per_address = {max(128, plan.sessions + 16)}\n"
        "[runs]\n"
        f"max_concurrent = {plan.sessions}\n"
        f"max_live_sessions = {max(1000, plan.sessions)}\n"
        "[agent_defaults]\n"
        'model = "faux/echo"\n'
    )


def _spawn_workers(port: int, token: str, plan: Plan) -> list[subprocess.Popen[str]]:
    procs = []
    for first in range(0, plan.sessions, CLIENTS_PER_WORKER):
        spec = {
            "port": port,
            "token": token,
            "first": first,
            "count": min(CLIENTS_PER_WORKER, plan.sessions - first),
            "deltas": plan.deltas,
            "timeout": RUN_TIMEOUT_S,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.sessions", "--worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"a client worker exited ({proc.wait()})")
    return line


def measure(plan: Plan, profile_dir: Path | None = None) -> Outcome:
    env = {"GATEWAY_FAUX_PACE_MS": str(plan.pace_ms)}
    profile = profile_dir / f"gatewayd-sessions-k{plan.sessions}.prof" if profile_dir else None
    with gateway_daemon(env=env, config=_config(plan), profile=profile) as daemon:
        procs = _spawn_workers(daemon.port, daemon.token, plan)
        try:
            for proc in procs:
                if _line(proc).strip() != "ready":
                    raise RuntimeError("a client worker failed to set up its sessions")
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = [json.loads(_line(proc)) for proc in procs]
            peak = peak_rss_bytes(daemon.pid)
        finally:
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    seen = [r for r in results if r["events"]]
    return Outcome(
        latencies_ms=[x for r in results for x in r["latencies"]],
        lost=sum(r["lost"] for r in results),
        duplicates=sum(r["duplicates"] for r in results),
        complete=sum(r["done"] for r in results) == plan.sessions,
        events=sum(r["events"] for r in results),
        seconds=max((r["last"] for r in seen), default=0.0) - min((r["first"] for r in seen), default=0.0),
        peak_rss=float(peak) / 2**20 if peak is not None else float("nan"),
    )


def _rows(plan: Plan, got: Outcome, base: Outcome) -> list[Row]:
    setting = f"K={plan.sessions:,}, M={plan.deltas}, {plan.pace_ms:g} ms/word"
    note = "" if got.complete else " [timed out]"
    baseline = "K=1"
    rate = got.events / got.seconds if got.seconds > 0 else float("nan")
    base_rate = base.events / base.seconds if base.seconds > 0 else float("nan")
    return [
        Row(f"event latency p50{note}", setting, got.p50, "ms", baseline, base.p50),
        Row(f"event latency p99{note}", setting, got.p99, "ms", baseline, base.p99),
        Row(
            "events lost + duplicated",
            setting,
            got.lost + got.duplicates,
            "",
            baseline,
            base.lost + base.duplicates,
        ),
        Row("native events received/s", setting, rate, "/s", baseline, base_rate),
        Row("daemon peak RSS", setting, got.peak_rss, "MiB", baseline, base.peak_rss),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="K = 50 against K = 1, short runs")
    parser.add_argument("--pace-ms", type=float, default=20.0, help="faux pace per word (default 20)")
    parser.add_argument("--deltas", type=int, help="words per reply (default 50, quick 10)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="write a cProfile of each daemon to DIR")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(_worker(json.loads(args.worker)))
        return
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    deltas = args.deltas or (10 if args.quick else 50)
    sizes = [50] if args.quick else [100, 1000]
    started = time.perf_counter()
    base = measure(Plan(1, deltas, args.pace_ms), args.profile)
    rows: list[Row] = []
    for size in sizes:
        plan = Plan(size, deltas, args.pace_ms)
        rows += _rows(plan, measure(plan, args.profile), base)
    print(render(rows))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
