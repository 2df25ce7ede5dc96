"""CPU per run start and finish: the daemon's CPU over bursts of short runs, fitted over reply length.

    .venv/bin/python -m bench.runs                  # replies of 10 to 400 words (about a minute)
    .venv/bin/python -m bench.runs --quick          # a few seconds
    .venv/bin/python -m bench.runs --profile FILE   # the daemon under cProfile, stats to FILE

One `gatewayd` (faux/echo at pace 0, so the model costs no waiting) in a temporary home, and
`--sessions` clients in this process. Before each burst every client makes a new session and
subscribes to its events (`sessions.events.subscribe`, as a dashboard or a chat binding follows
a session), so every burst starts from empty contexts whatever ran before. In the burst, for a
reply length W, every client sends `!long W` with `chat.send` and waits for its session to be
idle again, `--runs` times in a row; the daemon's CPU time (user + system, read from its CPU
clock) over the burst, divided by the number of runs, is the CPU of one run of W words. The
lengths are measured in turn, `--rounds` times, and each length's median is kept.

A straight line through (W, CPU per run) splits the cost in two: the intercept is what a run
costs however long its reply — accepting the message, starting the run, recording how it ended,
and the events that every run sends (the reply's start and end, the status changes) — and the
slope is the cost of each streamed word (the delta's journal append, its rendering and fan-out).

Baseline, measured in this process in the same run: the bare agent loop (`run_agent_loop` with
the same faux/echo model streaming the same `!long W` reply, events to a sink that drops them):
its CPU for one 10-word run beside the intercept, its CPU per word beside the slope, and its CPU
for a 10-word run beside the gateway's for the same reply.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from agent_core import AgentContext, AgentLoopConfig, TextContent, UserMessage, run_agent_loop
from bench._daemon import HOST, cpu_seconds, gateway_daemon
from bench._report import Row, render
from bench._wire import WireClient, open_many

IDLE_EVENT = b'"event":"session.status.changed"'
SHORT_WORDS = 10


@dataclass(frozen=True)
class Plan:
    lengths: tuple[int, ...]
    sessions: int
    runs: int
    rounds: int
    loop_runs: int


FULL = Plan(lengths=(10, 50, 100, 200, 400), sessions=8, runs=10, rounds=3, loop_runs=200)
QUICK = Plan(lengths=(10, 100), sessions=4, runs=5, rounds=1, loop_runs=20)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through `points`."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


# --- through the gateway ------------------------------------------------------------------------


class Follower:
    """One client's session: wakes the sender when the session reports `idle`."""

    def __init__(self) -> None:
        self.idle = asyncio.Event()

    def __call__(self, payload: bytes, _now: float) -> None:
        if IDLE_EVENT in payload and b'"status":"idle"' in payload:
            self.idle.set()


async def _session_runs(client: WireClient, follower: Follower, key: str, words: int, runs: int) -> None:
    for _ in range(runs):
        follower.idle.clear()
        await client.request(
            "chat.send",
            {"sessionKey": key, "message": f"!long {words}", "idempotencyKey": os.urandom(8).hex()},
        )
        await asyncio.wait_for(follower.idle.wait(), 60.0)


async def _gateway(plan: Plan, profile: Path | None) -> dict[int, float]:
    """Milliseconds of daemon CPU per run, per reply length (median over the rounds)."""
    config = f'[runs]\nmax_concurrent = {plan.sessions}\n[agent_defaults]\nmodel = "faux/echo"\n'
    samples: dict[int, list[float]] = {words: [] for words in plan.lengths}
    bursts = 0

    async def fresh_sessions() -> list[str]:
        nonlocal bursts
        bursts += 1
        keys = [f"agent:main:bench-runs-{bursts}-{i}" for i in range(plan.sessions)]
        for client, key in zip(clients, keys, strict=True):
            await client.request("sessions.create", {"key": key})
            await client.request("sessions.events.subscribe", {"key": key})
        return keys

    with gateway_daemon(env={"GATEWAY_FAUX_PACE_MS": "0"}, config=config, profile=profile) as daemon:
        clients = await open_many(HOST, daemon.port, plan.sessions)
        followers = [Follower() for _ in clients]
        for client, follower in zip(clients, followers, strict=True):
            await client.gateway_connect(daemon.token)
            client.on_event = follower
        keys = await fresh_sessions()
        burst = zip(clients, followers, keys, strict=True)
        await asyncio.gather(*(_session_runs(c, f, k, SHORT_WORDS, 2) for c, f, k in burst))  # warm-up
        for _ in range(plan.rounds):
            for words in plan.lengths:
                keys = await fresh_sessions()
                before = cpu_seconds(daemon.pid)
                await asyncio.gather(
                    *(
                        _session_runs(c, f, k, words, plan.runs)
                        for c, f, k in zip(clients, followers, keys, strict=True)
                    )
                )
                spent = cpu_seconds(daemon.pid) - before
                samples[words].append(spent * 1000 / (plan.runs * plan.sessions))
        for client in clients:
            client.close()
    return {words: statistics.median(values) for words, values in samples.items()}


# --- the bare agent loop ------------------------------------------------------------------------


async def _bare_loop(plan: Plan) -> dict[int, float]:
    """Milliseconds of this process's CPU per bare agent-loop run, per reply length."""
    from agent_core.models import resolve_model
    from agent_core.providers.faux_echo import PACE_ENV

    os.environ[PACE_ENV] = "0"
    config = AgentLoopConfig(model=resolve_model("faux/echo"))

    def sink(_event: object) -> None:
        return None

    async def one(words: int) -> None:
        prompt = UserMessage(content=[TextContent(text=f"!long {words}")])
        await run_agent_loop([prompt], AgentContext(system_prompt="bench", tools=[]), config, sink)

    out: dict[int, float] = {}
    await one(SHORT_WORDS)  # warm-up
    for words in plan.lengths:
        values = []
        for _ in range(plan.rounds):
            before = time.process_time()
            for _ in range(plan.loop_runs):
                await one(words)
            values.append((time.process_time() - before) * 1000 / plan.loop_runs)
        out[words] = statistics.median(values)
    return out


async def run(plan: Plan, profile: Path | None = None) -> list[Row]:
    gateway = await _gateway(plan, profile)
    bare = await _bare_loop(plan)
    intercept, slope = fit(list(gateway.items()))
    _, bare_slope = fit(list(bare.items()))
    lengths = f"replies of {', '.join(map(str, plan.lengths))} words"
    short = f"{SHORT_WORDS}-word reply"
    return [
        Row(
            "CPU per run, start + finish (fit intercept)",
            lengths,
            intercept,
            "ms",
            f"bare agent loop, one {short}",
            bare[SHORT_WORDS],
        ),
        Row(
            "CPU per streamed word (fit slope)",
            lengths,
            slope * 1000,
            "us",
            "bare agent loop, per word (slope)",
            bare_slope * 1000,
        ),
        Row(
            "CPU of one run through the gateway",
            short,
            gateway[SHORT_WORDS],
            "ms",
            f"bare agent loop, one {short}",
            bare[SHORT_WORDS],
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two lengths, a few runs each")
    parser.add_argument("--sessions", type=int, help="sessions sending at once (default 8, quick 4)")
    parser.add_argument("--runs", type=int, help="runs per session per burst (default 10, quick 5)")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="write a cProfile of the daemon to FILE")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.sessions:
        plan = Plan(plan.lengths, args.sessions, plan.runs, plan.rounds, plan.loop_runs)
    if args.runs:
        plan = Plan(plan.lengths, plan.sessions, args.runs, plan.rounds, plan.loop_runs)
    started = time.perf_counter()
    rows = asyncio.run(run(plan, args.profile))
    print(render(rows))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
