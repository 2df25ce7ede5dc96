"""Many sessions at once: K sessions streaming from faux together, one client each, beside K = 1.

    .venv/bin/python -m bench.sessions            # K = 100, 400 and 1,000 against K = 1 (a minute or two)
    .venv/bin/python -m bench.sessions --quick    # K = 50 and 20 against K = 1, a few seconds
    .venv/bin/python -m bench.sessions --lateness # only the word lateness rows (K = 100 and 400)
    .venv/bin/python -m bench.sessions --collector  # K = 400 word lateness beside the collector at 700
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

Word lateness (K = 100 and 400, `--quick` 20; each reply `!long 50` unless `--deltas` says
otherwise) looks at the same runs from the sender's side: `ts` is stamped when an event is
numbered, so event latency cannot see how long a message waited before its run made events. Each client
reads its clock (`time.monotonic()`, in the process that both sends and receives) just before it
sends; word i of the reply (`w1 w2 ... wN`: the number is in the text) is due `(i - 1) x pace`
after that, and its lateness is the receipt time of the `session.message.delta` that carries it
minus the send time minus `(i - 1) x pace`. A delta that carries several words counts once, as
its highest word. The faux model waits one pace before its first word (a model's time to first
token), so one pace is the floor of every lateness. Rows per K: lateness p50 / p99 and events
lost + duplicated, against K = 1 of the same run (a run of the same K and reply length serves
both sets of rows).

`--collector` measures the word lateness of K = 400 (`--quick` 100) twice: with the daemon's
default `[gateway] collector_young_threshold` and, as the baseline, with Python's own 700 (the
cyclic collector's youngest generation collected that much more often, and the older ones with
it, each collection stopping the event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._daemon import HOST, gateway_daemon, peak_rss_bytes
from bench._report import Row, percentile, render
from bench._wire import WireClient, open_many
from bench._workers import Workers

NATIVE_PREFIX = b'{"type":"event","event":"session.'
END_PREFIX = b'{"type":"event","event":"session.status.changed"'
CLIENTS_PER_WORKER = 250
RUN_TIMEOUT_S = 300.0
DELTA_EVENT = "session.message.delta"
PYTHON_YOUNG_THRESHOLD = 700
"""Python's own threshold for the cyclic collector's youngest generation (`gc.get_threshold()[0]`)."""
WORD_NUMBER = re.compile(r"\bw(\d+)\b")
"""A word of the faux `!long N` reply and its number."""


@dataclass(frozen=True)
class Plan:
    sessions: int
    deltas: int
    pace_ms: float
    young_threshold: int | None = None
    """The daemon's `[gateway] collector_young_threshold`; None leaves its default."""


@dataclass(frozen=True)
class Outcome:
    latencies_ms: list[float]
    lost: int
    duplicates: int
    complete: bool
    events: int
    seconds: float
    peak_rss: float
    lateness_ms: list[float]

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)


# --- client worker processes --------------------------------------------------------------------


class Follower:
    """One client's view of its session: native events' seqs and latencies, and when each
    numbered word of the reply arrived."""

    __slots__ = ("clock_offset", "done", "first", "last", "latencies", "on_done", "sent", "seqs", "words")

    def __init__(self, on_done: asyncio.Event, clock_offset: float) -> None:
        self.on_done = on_done
        self.clock_offset = clock_offset  # wall clock - monotonic clock, in seconds
        self.seqs: list[int] = []
        self.latencies: list[float] = []
        self.first = 0.0
        self.last = 0.0
        self.done = False
        self.sent = 0.0  # monotonic clock just before chat.send was written
        self.words: list[tuple[float, int]] = []  # (receipt time, highest word number in the delta)

    def __call__(self, payload: bytes, now: float) -> None:
        if not payload.startswith(NATIVE_PREFIX):
            return
        frame = json.loads(payload)
        event = frame["payload"]
        self.latencies.append((now + self.clock_offset) * 1000 - event["ts"])
        self.seqs.append(event["sessionSeq"])
        if frame["event"] == DELTA_EVENT and event.get("kind") == "text":
            numbers = WORD_NUMBER.findall(event["delta"])
            if numbers:
                self.words.append((now, max(int(n) for n in numbers)))
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

    def lateness(self, pace_ms: float) -> list[float]:
        """Per delta, ms after its highest word was due: `(i - 1) x pace_ms` after the send."""
        return [(at - self.sent) * 1000 - (word - 1) * pace_ms for at, word in self.words]


async def _follow(client: WireClient, token: str, key: str, follower: Follower) -> None:
    await client.gateway_connect(token)
    await client.request("sessions.create", {"key": key})
    client.on_event = follower
    await client.request("sessions.events.subscribe", {"key": key})


async def _send(client: WireClient, key: str, message: str, follower: Follower) -> None:
    # `request` writes the frame before its first await, so this is the moment it leaves.
    follower.sent = time.monotonic()
    await client.request("chat.send", {"sessionKey": key, "message": message, "idempotencyKey": f"run-{key}"})


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
    await asyncio.gather(*(_send(c, k, message, f) for c, k, f in zip(clients, keys, followers, strict=True)))
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
                "lateness": [round(x, 3) for f in followers for x in f.lateness(spec["pace_ms"])],
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
    threshold = f"collector_young_threshold = {plan.young_threshold}\n" if plan.young_threshold else ""
    return (
        "[gateway]\n"
        f"max_unauthenticated_per_address = {max(128, plan.sessions + 16)}\n"
        f"{threshold}"
        "[runs]\n"
        f"max_concurrent = {plan.sessions}\n"
        f"max_live_sessions = {max(1000, plan.sessions)}\n"
        "[agent_defaults]\n"
        'model = "faux/echo"\n'
    )


def _worker_specs(port: int, token: str, plan: Plan) -> list[dict[str, Any]]:
    return [
        {
            "port": port,
            "token": token,
            "first": first,
            "count": min(CLIENTS_PER_WORKER, plan.sessions - first),
            "deltas": plan.deltas,
            "pace_ms": plan.pace_ms,
            "timeout": RUN_TIMEOUT_S,
        }
        for first in range(0, plan.sessions, CLIENTS_PER_WORKER)
    ]


def measure(plan: Plan, profile_dir: Path | None = None) -> Outcome:
    env = {"GATEWAY_FAUX_PACE_MS": str(plan.pace_ms)}
    profile = profile_dir / f"gatewayd-sessions-k{plan.sessions}-m{plan.deltas}.prof" if profile_dir else None
    with (
        gateway_daemon(env=env, config=_config(plan), profile=profile) as daemon,
        Workers("bench.sessions", _worker_specs(daemon.port, daemon.token, plan)) as workers,
    ):
        workers.ready("a client worker failed to set up its sessions")
        results = workers.go()
        peak = peak_rss_bytes(daemon.pid)
    seen = [r for r in results if r["events"]]
    return Outcome(
        latencies_ms=[x for r in results for x in r["latencies"]],
        lost=sum(r["lost"] for r in results),
        duplicates=sum(r["duplicates"] for r in results),
        complete=sum(r["done"] for r in results) == plan.sessions,
        events=sum(r["events"] for r in results),
        seconds=max((r["last"] for r in seen), default=0.0) - min((r["first"] for r in seen), default=0.0),
        peak_rss=float(peak) / 2**20 if peak is not None else float("nan"),
        lateness_ms=[x for r in results for x in r["lateness"]],
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


def _lateness_rows(plan: Plan, got: Outcome, base: Outcome, baseline: str = "K=1") -> list[Row]:
    setting = f"K={plan.sessions:,} at once, !long {plan.deltas}, {plan.pace_ms:g} ms/word"
    note = "" if got.complete else " [timed out]"
    rows = [
        Row(
            f"word lateness p{round(q * 100)}{note}",
            setting,
            percentile(got.lateness_ms, q),
            "ms",
            baseline,
            percentile(base.lateness_ms, q),
        )
        for q in (0.50, 0.99)
    ]
    lost = got.lost + got.duplicates
    return [*rows, Row("events lost + duplicated", setting, lost, "", baseline, base.lost + base.duplicates)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sessions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="K = 50 and 20 against K = 1, short runs")
    parser.add_argument("--lateness", action="store_true", help="only the word lateness rows")
    parser.add_argument(
        "--collector",
        action="store_true",
        help="only K = 400 word lateness (quick 100) beside the same with the collector at Python's 700",
    )
    parser.add_argument("--pace-ms", type=float, default=20.0, help="faux pace per word (default 20)")
    parser.add_argument(
        "--deltas", type=int, help="words per reply (default 50; quick 10, except for word lateness)"
    )
    parser.add_argument("--profile", type=Path, metavar="DIR", help="write a cProfile of each daemon to DIR")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(_worker(json.loads(args.worker)))
        return
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    deltas = args.deltas or (10 if args.quick else 50)
    words = args.deltas or 50
    sizes = [] if args.lateness or args.collector else [50] if args.quick else [100, 1000]
    lateness_sizes = [] if args.collector else [20] if args.quick else [100, 400]
    collector_sizes = ([100] if args.quick else [400]) if args.collector else []
    started = time.perf_counter()
    # A plan measured once serves every row that asks for it (in the full run, K = 1 and K = 100).
    outcomes: dict[Plan, Outcome] = {}

    def outcome(plan: Plan) -> Outcome:
        if plan not in outcomes:
            outcomes[plan] = measure(plan, args.profile)
        return outcomes[plan]

    rows: list[Row] = []
    for size in sizes:
        base = outcome(Plan(1, deltas, args.pace_ms))
        plan = Plan(size, deltas, args.pace_ms)
        rows += _rows(plan, outcome(plan), base)
    for size in lateness_sizes:
        base = outcome(Plan(1, words, args.pace_ms))
        plan = Plan(size, words, args.pace_ms)
        rows += _lateness_rows(plan, outcome(plan), base)
    for size in collector_sizes:
        base = outcome(Plan(size, words, args.pace_ms, young_threshold=PYTHON_YOUNG_THRESHOLD))
        plan = Plan(size, words, args.pace_ms)
        rows += _lateness_rows(plan, outcome(plan), base, baseline=f"collector at {PYTHON_YOUNG_THRESHOLD}")
    print(render(rows))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
