"""Soak: many sessions running faux conversations with tools for a long time, watched by clients
that come and go; what the daemon looks like over it, and whether anything was lost or run twice.

The drivers are in `bench._soak_drivers`, the watchers in `bench._soak_watchers`; starting the
daemon is in `bench._daemon`, the report's table in `bench._report`.

    .venv/bin/python -m bench.soak                       # 30 minutes (the long one)
    .venv/bin/python -m bench.soak --window 3000         # 30 minutes, sessions compacting as they go
    .venv/bin/python -m bench.soak --minutes 2 --window 600 --json out.json   # the suite's short mode

The short mode is what `tests/reliability/test_soak_short.py` runs.

Load: `--sessions` (200) sessions, each a loop on one of `--drivers` (8) connections: send a
message, wait for its run to end (`agent.wait`), think for a random `--think` (2-10 s), again.
Messages mix `!tool bash {"command": "echo hi"}`, `!long 50` and plain text; faux/echo streams
10 ms a word. One message in ten is sent a second time with the same idempotency key (a client
retrying): that must answer `in_flight` or the first one's outcome, never start a run.

Watchers: `--watchers` (50) clients (`bench._wire.WireClient`), each following `--follow` (8)
random sessions with `sessions.events.subscribe`. Every 5-30 s each drops its connection (a FIN
without a close frame, or a TCP reset, at random) and comes back, resuming every session from the
last sessionSeq it saw; each checks that what arrives continues exactly there (no gap, no repeat).

The live sessions' cached contexts (`[runs] context_cache_bytes`) take the RSS up until they fill
their budget, which a rising RSS slope would not tell from a leak. `--context-cache-mib` sets the
budget (default: 0 for soaks shorter than five minutes, whose warm-up is too short; the daemon's
default of 64 MiB otherwise); every sample reads the bytes the cache is charged (`status`), and a
row gives them at the end against the budget. A budget the cache fills within the warm-up (8 MiB
for the default load fills in about two minutes) leaves the slope to everything else.

Compaction: the faux model's window (128,000 tokens) is far more than 30 minutes of this load
fills, so by default no session compacts and every context only grows. `--window TOKENS` gives
the model a window of that size instead (with a summary limit of a fortieth of it; `[compaction]`
keeps an eighth of it in reserve and three eighths of recent messages), so sessions compact as
they would over days of use with a real model's window, and the soak measures that steady
state. The tools' definitions count toward a context too (about a thousand tokens here): with
`--window 3000` a session compacts about every second run, with 600 at nearly every run. The
compactions are counted (the database's compaction entries, read at the end).

Sampled every `--sample-s` seconds: the daemon's RSS and open FDs (psutil), its `status`
(event-loop lag histogram from `gateway.loop_lag`), and a `health` round trip on a probe
connection. Before the load, a few idle seconds give the baselines of lag and round trip.

At the end the drivers stop, the runs finish, every watcher catches up with every session it
follows, and every session's transcript is read: each idempotency key's message must be there
exactly once and its run must have ended `ok`.

Rows (baselines from the same run): RSS at the end vs after warm-up (the first fifth of the run);
RSS slope after warm-up (least squares, MiB per hour); the context cache's charged bytes at the
end vs its budget; runs ended per second over the last five minutes vs the first five (a fifth of
the run each, when shorter than 25 minutes); the daemon's open sockets and open files once the
watchers left vs idle before the load, with the same connections open (the files include the
database's connection pool, which grows under load up to its bound: 1 writer, 8 readers);
event-loop lag p99 under load vs idle (histogram buckets: 1, 2, 5, 10, 20, 50 ... ms); `health`
round trip p99 under load vs idle; events lost; duplicate runs. Exits 1 when an event was lost, a
run was duplicated or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench._daemon import Daemon, gateway_daemon
from bench._report import Row, percentile, render
from bench._soak_drivers import Totals, call, drive, verify_transcripts
from bench._soak_watchers import Watcher, catch_up, watch
from gateway.client import GatewayClient
from gateway.loop_lag import histogram_percentile

ENV = {"GATEWAY_FAUX_PACE_MS": "10"}
CACHE_CONFIG = "[runs]\ncontext_cache_bytes = {budget}\n"
WINDOW_CONFIG = """
[compaction]
reserve_tokens = {reserve}
keep_recent_tokens = {keep}

[[models]]
provider = "faux"
id = "echo"
api = "faux"
name = "Faux echo"
context_window = {window}
max_tokens = {summary}
"""


def window_config(window: int) -> str:
    """The faux echo model with a window of `window` tokens, and compaction settings to match."""
    return WINDOW_CONFIG.format(
        window=window, summary=window // 40, reserve=window // 8, keep=window * 3 // 8
    )


def count_compactions(home: Path) -> int:
    """Compaction entries in the daemon's database (read once its load has stopped)."""
    with contextlib.closing(sqlite3.connect(f"file:{home / 'gateway.db'}?mode=ro", uri=True)) as conn:
        return int(conn.execute("SELECT count(*) FROM entries WHERE kind = 'compaction'").fetchone()[0])


@dataclass
class Sample:
    t: float
    rss_mib: float
    fds: int
    lag: dict[str, Any]
    rtt_ms: float
    runs_in_flight: int
    runs_done: int = 0
    """Runs the drivers had seen end when the sample was taken."""
    cache_bytes: int = 0
    """Bytes the live sessions' cached contexts were charged (`status`)."""


# --- sampling --------------------------------------------------------------------------------------


async def _sample(daemon: Daemon, probe: GatewayClient, started: float) -> Sample:
    proc = psutil.Process(daemon.pid)
    t0 = time.monotonic()
    await call(probe, "health", {}, timeout=30)
    rtt = (time.monotonic() - t0) * 1000
    status = await call(probe, "status", {}, timeout=30)
    return Sample(
        t=time.monotonic() - started,
        rss_mib=proc.memory_info().rss / 2**20,
        fds=proc.num_fds(),
        lag=status["eventLoopLag"],
        rtt_ms=rtt,
        runs_in_flight=int(status["runsInFlight"]),
        cache_bytes=int(status["contextCache"]["chargedBytes"]),
    )


def _window_rates(samples: list[Sample], window_s: float) -> tuple[float, float]:
    """Runs ended per second over the first and over the last `window_s` of the load (from the
    samples' running count; the last sample is taken as the drivers are told to stop)."""
    if len(samples) < 2:
        return math.nan, math.nan
    end = samples[-1]
    head = min(samples, key=lambda s: abs(s.t - window_s))
    tail = min(samples, key=lambda s: abs(s.t - (end.t - window_s)))
    first = head.runs_done / head.t if head.t > 0 else math.nan
    last = (end.runs_done - tail.runs_done) / (end.t - tail.t) if end.t > tail.t else math.nan
    return first, last


def _descriptors(pid: int) -> tuple[int, int]:
    """The daemon's open (sockets, pipes and other non-files; files). The files are the log
    outputs, the lock and the database's connections (a bounded pool that grows under load)."""
    sockets = files = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("/"):
            files += 1
        else:
            sockets += 1
    return sockets, files


def _slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MiB per hour."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return float("nan")
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600


# --- the run ---------------------------------------------------------------------------------------


async def _idle_baseline(daemon: Daemon, probe: GatewayClient, seconds: float) -> tuple[float, float]:
    """(lag p99 ms, health round trip p99 ms) with nothing to do."""
    before = (await call(probe, "status", {}))["eventLoopLag"]["histogram"]
    rtts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        await call(probe, "health", {})
        rtts.append((time.monotonic() - t0) * 1000)
        await asyncio.sleep(0.1)
    after = (await call(probe, "status", {}))["eventLoopLag"]["histogram"]
    lag = histogram_percentile(before, after, 0.99)
    return (lag if lag is not None else float("nan")), percentile(rtts, 0.99)


async def soak(args: argparse.Namespace, daemon: Daemon) -> dict[str, Any]:
    rand = random.Random(args.seed)
    keys = [f"agent:main:soak-{i:04d}" for i in range(args.sessions)]
    totals = Totals()
    stop = asyncio.Event()
    drivers = [GatewayClient(daemon.url, token=daemon.token, caps=()) for _ in range(args.drivers)]
    probe = GatewayClient(daemon.url, token=daemon.token, caps=())
    for client in [*drivers, probe]:
        await client.connect()
    try:
        for n, key in enumerate(keys):
            await call(drivers[n % len(drivers)], "sessions.create", {"key": key})
        idle_lag, idle_rtt = await _idle_baseline(daemon, probe, args.idle_s)
        fds_idle = _descriptors(daemon.pid)

        watchers = [Watcher(i, rand.sample(keys, min(args.follow, len(keys)))) for i in range(args.watchers)]
        started = time.monotonic()
        duration = args.minutes * 60
        tasks = [
            asyncio.create_task(
                drive(
                    drivers[n % len(drivers)],
                    key,
                    totals,
                    stop,
                    random.Random(f"{args.seed}:{key}"),
                    args.think,
                )
            )
            for n, key in enumerate(keys)
        ]
        tasks += [
            asyncio.create_task(watch(daemon, w, stop, random.Random(f"{args.seed}:w{w.index}")))
            for w in watchers
        ]
        samples: list[Sample] = []
        while time.monotonic() - started < duration:
            samples.append(await _sample(daemon, probe, started))
            samples[-1].runs_done = totals.runs
            if args.verbose:
                s = samples[-1]
                print(
                    f"t={s.t:6.0f}s rss={s.rss_mib:6.1f}MiB fds={s.fds} lag p99={s.lag['p99Ms']}ms "
                    f"rtt={s.rtt_ms:.0f}ms runs={totals.runs} in flight={s.runs_in_flight}",
                    file=sys.stderr,
                )
            await asyncio.sleep(args.sample_s)
        samples.append(await _sample(daemon, probe, started))
        samples[-1].runs_done = totals.runs
        stop.set()
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
        final = await _sample(daemon, probe, started)

        last_seqs = {
            key: int((await call(probe, "sessions.describe", {"key": key}))["lastSeq"]) for key in keys
        }
        await asyncio.gather(*(catch_up(daemon, w, last_seqs, timeout=60) for w in watchers))
        lost = [p for w in watchers for p in w.problems]
        duplicates = list(totals.duplicate_answers)
        duplicates += await verify_transcripts(probe, totals)
        seen_runs: Counter[str] = Counter()
        for w in watchers:
            for run, count in w.finished_runs.items():
                seen_runs[run] = max(seen_runs[run], count)
        duplicates += [f"run {run} finished {n} times" for run, n in seen_runs.items() if n > 1]
        # Back to the idle connections (drivers and probe): what is left open is left over.
        deadline = time.monotonic() + 15
        while (await call(probe, "status", {}))["connections"] > len(
            drivers
        ) + 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        fds_after = _descriptors(daemon.pid)
    finally:
        for client in [*drivers, probe]:
            await client.aclose()

    window_s = min(300.0, duration / 5)
    first_rate, last_rate = _window_rates(samples, window_s)
    warm = max(1, len(samples) // 5)
    steady = samples[warm:] or samples
    lag_p99 = histogram_percentile(steady[0].lag["histogram"], final.lag["histogram"], 0.99)
    return {
        "minutes": args.minutes,
        "window": args.window,
        "compactions": count_compactions(daemon.home),
        "elapsed_s": round(elapsed, 1),
        "sessions": args.sessions,
        "watchers": args.watchers,
        "runs": totals.runs,
        "retries": totals.retries,
        "failed_runs": totals.failed,
        "events_received": sum(w.received for w in watchers),
        "reconnects": sum(w.reconnects for w in watchers),
        "lost": lost,
        "duplicates": duplicates,
        "rss_warm_mib": round(steady[0].rss_mib, 1),
        "rss_end_mib": round(final.rss_mib, 1),
        "rss_max_mib": round(max(s.rss_mib for s in [*samples, final]), 1),
        "rss_slope_mib_per_h": round(_slope_per_hour([(s.t, s.rss_mib) for s in [*steady, final]]), 2),
        "sockets_idle": fds_idle[0],
        "sockets_after": fds_after[0],
        "files_idle": fds_idle[1],
        "files_after": fds_after[1],
        "fds_max": max(s.fds for s in samples),
        "lag_p99_ms": lag_p99 if lag_p99 is not None else float("nan"),
        "lag_window_p99_max_ms": max(s.lag["p99Ms"] for s in steady),
        "lag_max_ms": final.lag["maxSinceStartMs"],
        "lag_idle_p99_ms": idle_lag,
        "rtt_p99_ms": round(percentile([s.rtt_ms for s in steady], 0.99), 1),
        "rtt_idle_p99_ms": round(idle_rtt, 1),
        "window_s": window_s,
        "cache_end_mib": round(final.cache_bytes / 2**20, 1),
        "cache_budget_mib": args.context_cache_mib,
        "runs_per_s_first": round(first_rate, 2),
        "runs_per_s_last": round(last_rate, 2),
        "samples": [asdict(s) | {"lag": s.lag["p99Ms"]} for s in samples],
    }


def rows(result: dict[str, Any]) -> list[Row]:
    setting = f"{result['sessions']} sessions, {result['watchers']} watchers, {result['minutes']:g} min"
    if result["window"]:
        setting += f", window {result['window']:,}"
    nan = float("nan")
    return [
        Row("compactions", setting, result["compactions"], "", "-", nan),
        Row(
            "daemon RSS at the end",
            setting,
            result["rss_end_mib"],
            "MiB",
            "after warm-up",
            result["rss_warm_mib"],
        ),
        Row("RSS slope after warm-up", setting, result["rss_slope_mib_per_h"], "MiB/h", "-", nan),
        Row(
            "context cache charged at the end",
            setting,
            result["cache_end_mib"],
            "MiB",
            "budget",
            result["cache_budget_mib"],
        ),
        Row(
            f"runs ended/s, last {result['window_s'] / 60:g} min",
            setting,
            result["runs_per_s_last"],
            "/s",
            f"first {result['window_s'] / 60:g} min",
            result["runs_per_s_first"],
        ),
        Row(
            "open sockets, clients gone", setting, result["sockets_after"], "", "idle", result["sockets_idle"]
        ),
        Row("open files, clients gone", setting, result["files_after"], "", "idle", result["files_idle"]),
        Row("event-loop lag p99", setting, result["lag_p99_ms"], "ms", "idle", result["lag_idle_p99_ms"]),
        Row("health round trip p99", setting, result["rtt_p99_ms"], "ms", "idle", result["rtt_idle_p99_ms"]),
        Row("events lost", setting, len(result["lost"]), "events", "-", nan),
        Row("duplicate runs", setting, len(result["duplicates"]), "", "-", nan),
    ]


def _finite(value: Any) -> Any:
    """JSON has no NaN: unknown numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--follow", type=int, default=8, help="sessions each watcher follows")
    parser.add_argument("--drivers", type=int, default=8, help="connections the sessions are driven over")
    parser.add_argument("--think", type=float, nargs=2, default=(2.0, 10.0), metavar=("MIN", "MAX"))
    parser.add_argument("--sample-s", type=float, default=None, help="default: 5 (2 when under 5 minutes)")
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--context-cache-mib",
        type=float,
        default=None,
        help="[runs] context_cache_bytes in MiB (default: 0 under 5 minutes, else the daemon's 64)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=0,
        help="the faux model's context window in tokens, so sessions compact (default: its own 128,000)",
    )
    parser.add_argument("--json", type=Path, help="also write the results (with every sample) here")
    parser.add_argument("--verbose", action="store_true", help="print each sample to stderr")
    args = parser.parse_args(argv)
    if args.sample_s is None:
        args.sample_s = 2.0 if args.minutes < 5 else 5.0
    args.think = tuple(args.think)
    if args.context_cache_mib is None:
        args.context_cache_mib = 0.0 if args.minutes < 5 else 64.0
    config = CACHE_CONFIG.format(budget=int(args.context_cache_mib * 2**20))
    if args.window:
        config += window_config(args.window)
    with gateway_daemon(env=ENV, config=config) as daemon:
        result = asyncio.run(soak(args, daemon))
    print(render(rows(result)))
    print(
        f"\n({result['runs']:,} runs ({result['retries']} retried sends), "
        f"{result['events_received']:,} events "
        f"to watchers over {result['reconnects']} reconnects in {result['elapsed_s']:.0f} s; worst lag "
        f"{result['lag_max_ms']:.0f} ms; ratios compare with a baseline from this same run)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(_finite(result), indent=1))
    problems = [*result["lost"], *result["duplicates"], *result["failed_runs"]]
    for problem in problems[:20]:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
