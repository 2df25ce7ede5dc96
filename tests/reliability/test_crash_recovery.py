"""SIGKILL of the daemon at seeded random points of streamed runs with tool calls.

One state directory lives through `RESTARTS` crashes. Each cycle starts the daemon, lets a
long-lived client resume every session from the last `sessionSeq` it saw, checks what the previous
crash left (`_verify`), then starts a run in each of three sessions (a `bash` tool call, then a
streamed reply, plus a follow-up message queued behind it) and SIGKILLs the daemon. One session per
cycle (the driver, rotating) decides the moment: the kill comes after the k-th event of its run
(k seeded, 1..50) plus a random sub-10 ms delay, so it always lands mid-run. The two others started
their (longer) runs at seeded random offsets before it, so each sits at another random point of its
run. Every run cut by a kill is one crash point; at least `MIN_POINTS` must be reached. Replay a
failure with `GATEWAY_RELIABILITY_SEED=<seed>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.client import GatewayClient
from sessions.recovery import INTERRUPTED_TEXT
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import (
    SEED,
    Follower,
    assert_contiguous,
    connected,
    event_log,
    history,
    processes_with,
    rng,
    strip,
    text_of,
    tool_message,
)

pytestmark = pytest.mark.slow

RESTARTS = 8
MIN_POINTS = 20
SESSIONS = ("agent:main:crash-a", "agent:main:crash-b", "agent:main:crash-c")
MARKER = "0.1501"  # the tools' sleep, so a leaked child can be found by its command line
DRIVER_COMMAND = f"printf 'alpha\\nbeta\\n'; sleep {MARKER}; seq 1 40"
COMPANION_COMMAND = f"printf 'gamma\\n'; sleep {MARKER}; seq 1 120"
MAX_KILL_EVENT = 50
"""The driver's run has ~60 events before its follow-up turn and the last of them come 8 ms apart,
so no driver run can finish before its SIGKILL lands."""
ENV = {"GATEWAY_FAUX_PACE_MS": "8"}


@dataclass
class Plan:
    key: str
    main: str
    follow: str
    driver: bool
    offset: float
    """Seconds after the cycle starts at which a companion sends its message."""
    kill_after: int = 0
    """For the driver: the event of its run after which the daemon is killed."""


@dataclass
class Cycle:
    index: int
    plans: list[Plan]
    kill_after: int
    delay: float

    @property
    def where(self) -> str:
        kill = f"kill after driver event {self.kill_after} + {self.delay * 1e3:.1f} ms"
        return f"seed {SEED}, cycle {self.index} ({kill})"


class Pump:
    """Feeds every event the client receives to the followers, in the background."""

    def __init__(self, client: GatewayClient, followers: dict[str, Follower]) -> None:
        self.client = client
        self.followers = followers
        self.error: BaseException | None = None
        self._task = asyncio.create_task(self._run())

    def _feed(self, frame: dict[str, Any]) -> None:
        for follower in self.followers.values():
            follower.feed([frame])

    async def _run(self) -> None:
        try:
            while (frame := await self.client.next_event()) is not None:
                self._feed(frame)
        except AssertionError as exc:
            self.error = exc

    async def wait(self, check: Callable[[], bool], *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.error is not None:
                raise self.error
            if self._task.done():
                raise AssertionError(f"connection ended while waiting for {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.002)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        # What reached the client before the end was durable before it was published.
        for frame in self.client.drain_events():
            self._feed(frame)
        if self.error is not None:
            raise self.error

    async def caught_up(self, key: str) -> int:
        last = int((await self.client.call("sessions.describe", {"key": key}))["lastSeq"])
        follower = self.followers[key]
        await self.wait(lambda: follower.last_seq >= last, timeout=15, what=f"{key} seq {last}")
        return last


async def _follow_all(client: GatewayClient, followers: dict[str, Follower]) -> None:
    """Resume every session from the last seq this client saw (the client outlives daemons)."""
    for follower in followers.values():
        answer = await client.call(
            "sessions.events.subscribe", {"key": follower.key, "afterSeq": follower.last_seq}
        )
        assert answer["replay"] == "exact", answer
        follower.session_id = answer["sessionId"]


async def _start_run(pump: Pump, plan: Plan) -> None:
    client, follower = pump.client, pump.followers[plan.key]
    base = await pump.caught_up(plan.key)
    await asyncio.sleep(plan.offset)
    command = DRIVER_COMMAND if plan.driver else COMPANION_COMMAND
    sent = await client.call(
        "chat.send",
        {
            "sessionKey": plan.key,
            "message": tool_message("bash", {"command": command}),
            "idempotencyKey": plan.main,
        },
    )
    assert sent["status"] == "started", sent
    await pump.wait(lambda: follower.last_seq > base, timeout=10, what=f"the first event of {plan.main}")
    queued = await client.call(
        "chat.send",
        {
            "sessionKey": plan.key,
            "message": f"follow-up {plan.follow}",
            "idempotencyKey": plan.follow,
            "queueMode": "followup",
        },
    )
    assert queued["status"] == "started", queued
    if plan.driver:
        await pump.wait(
            lambda: follower.last_seq >= base + plan.kill_after, timeout=10, what="the kill event"
        )


async def _run_and_kill(daemon: Daemon, pump: Pump, cycle: Cycle) -> None:
    companions = [asyncio.create_task(_start_run(pump, plan)) for plan in cycle.plans if not plan.driver]
    await asyncio.gather(*companions)
    await _start_run(pump, next(plan for plan in cycle.plans if plan.driver))
    await asyncio.sleep(cycle.delay)
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    await pump.stop()


def _user_positions(messages: list[dict[str, Any]], key: str) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "user" and m.get("idempotencyKey") == key]


async def _verify(daemon: Daemon, pump: Pump, cycle: Cycle, plan: Plan, cuts: Counter[str]) -> bool:
    """Check one session after the restart that followed `cycle`; True when its run was cut."""
    client, where, key = pump.client, f"{cycle.where}, {plan.key}", plan.key
    # Every accepted input ends in exactly one outcome: run after the restart, or reported cut off.
    outcomes = {}
    for idem in (plan.main, plan.follow):
        waited = await client.call("agent.wait", {"runId": idem, "timeoutMs": 20_000}, timeout=30)
        assert waited["status"] in ("ok", "aborted"), (where, idem, waited)
        again = await client.call(
            "chat.send", {"sessionKey": key, "message": "again", "idempotencyKey": idem}
        )
        assert again["status"] == waited["status"], (where, idem, waited, again)
        outcomes[idem] = waited["status"]

    log = await event_log(daemon, key)
    assert_contiguous(log, what=f"{where}: event log")
    assert await pump.caught_up(key) == log[-1]["sessionSeq"], where
    follower = pump.followers[key]
    assert [(e["sessionSeq"], e["name"]) for e in follower.events] == [
        (e["sessionSeq"], e["name"]) for e in log
    ], f"{where}: the resuming client saw another event sequence than the log holds"

    hist = await history(client, key)
    assert "inFlightRun" not in hist, (where, hist.get("inFlightRun"))
    transcript = [strip(m) for m in hist["messages"]]
    entry_ids = [m["__gateway"]["id"] for m in hist["messages"]]
    assert entry_ids == [e["messageId"] for e in log if e["name"] == "message.completed"], (
        f"{where}: transcript and event log disagree"
    )
    assert len(set(entry_ids)) == len(entry_ids), f"{where}: a message is in the transcript twice"
    assert follower.messages == transcript, (
        f"{where}: the resuming client's transcript differs from the database"
    )

    finished = [
        e for e in log if e["name"] == "agent.finished" and e.get("terminationReason") == "interrupted"
    ]
    ending = next(
        i for i, e in enumerate(log) if e["name"] == "agent.finished" and e.get("runId") == plan.main
    )
    cut = log[ending]["terminationReason"] == "interrupted"
    cuts[key] += cut
    assert len(finished) == cuts[key], (where, [e.get("runId") for e in finished])
    if plan.driver:
        assert cut, f"{where}: the driver's run was not cut by the kill: {log[ending]}"
    cut_position = len(transcript)
    if cut:
        # Closed once, with an aborted reply that holds what was streamed before the kill.
        assert log[ending + 1]["name"] == "status.changed" and log[ending + 1]["status"] == "interrupted", (
            where
        )
        closing = log[ending - 1]
        assert closing["name"] == "message.completed", (where, closing)
        reply = closing["message"]
        assert reply["role"] == "assistant" and reply["stopReason"] == "aborted", (where, reply)
        assert reply["errorMessage"] == INTERRUPTED_TEXT, (where, reply)
        streamed = "".join(
            e["delta"]
            for e in log[:ending]
            if e["name"] == "message.delta"
            and e.get("messageId") == closing["messageId"]
            and e["kind"] == "text"
        )
        assert text_of(reply) == streamed, f"{where}: the cut-off reply lost streamed text"
        cut_position = entry_ids.index(closing["messageId"])
    else:
        assert log[ending]["terminationReason"] == "no_tool_calls", (where, log[ending])
    for message in transcript:
        for block in message.get("content") or ():
            if block.get("type") == "toolCall":
                results = [m for m in transcript if m.get("toolCallId") == block["id"]]
                assert len(results) == 1, f"{where}: tool call {block['id']} has {len(results)} results"

    # Inputs: one that reached the cut-off run stays there and is never re-run; one that had not
    # started runs once after the restart.
    for idem, status in outcomes.items():
        positions = _user_positions(transcript, idem)
        assert len(positions) <= 1, f"{where}: input {idem} is in the transcript {len(positions)} times"
        if positions and positions[0] < cut_position and cut:
            assert status == "aborted", f"{where}: input {idem} was in the cut-off run but answered {status}"
        else:
            assert status == "ok" and positions, f"{where}: input {idem} did not run once ({status})"

    row = await client.call("sessions.describe", {"key": key})
    expected = "interrupted" if cut and "ok" not in outcomes.values() else "idle"
    assert row["status"] == expected, (where, row["status"], outcomes)
    return cut


async def test_sigkill_at_random_points_of_streamed_runs_loses_and_repeats_nothing(
    gateway_home: Path,
) -> None:
    rand = rng("crash")
    cycles = []
    for i in range(RESTARTS):
        driver = SESSIONS[i % len(SESSIONS)]
        kill_after = rand.randint(1, MAX_KILL_EVENT)
        plans = [
            Plan(
                key=key,
                main=f"crash-{i}-{n}-main",
                follow=f"crash-{i}-{n}-follow",
                driver=key == driver,
                offset=0.0 if key == driver else rand.uniform(0, 0.3),
                kill_after=kill_after if key == driver else 0,
            )
            for n, key in enumerate(SESSIONS)
        ]
        cycles.append(Cycle(i, plans, kill_after, rand.uniform(0, 0.008)))
    followers = {key: Follower(key) for key in SESSIONS}
    cuts: Counter[str] = Counter()
    points = 0
    previous: Cycle | None = None
    for index in range(RESTARTS + 1):
        daemon = start_daemon(gateway_home, env=ENV, tag=f"-{index}")
        try:
            async with connected(daemon) as client:
                if index == 0:
                    for key in SESSIONS:
                        await client.call("sessions.create", {"key": key})
                await _follow_all(client, followers)
                pump = Pump(client, followers)
                if previous is not None:
                    for plan in previous.plans:
                        points += await _verify(daemon, pump, previous, plan, cuts)
                    listing = await client.call("sessions.list", {"limit": 100})
                    assert not [s["key"] for s in listing["sessions"] if s["status"] == "running"]
                if index == RESTARTS:
                    await pump.stop()
                    break
                previous = cycles[index]
                await _run_and_kill(daemon, pump, previous)
        except BaseException:
            print(daemon.logs()[-6000:])
            raise
        finally:
            if daemon.proc.poll() is None:
                daemon.stop()
    print(f"crash points: {points}")
    assert points >= MIN_POINTS, f"only {points} runs were cut by a kill (seed {SEED})"
    assert not processes_with(f"sleep {MARKER}"), "a tool's child outlived the daemon that started it"
