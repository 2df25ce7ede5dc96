"""`gateway.automation.scheduler` over a real store and session manager (SQLite, and PostgreSQL
when configured), with a clock the test moves: slots fire once, time zones and daylight saving,
catch-up after a restart for each policy, two schedulers racing over one database, a restart at
the due time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.automation import SlotTaken
from gateway.automation.job_runner import JobRunner
from gateway.automation.jobs import Job, new_job, patched
from gateway.automation.launcher import Launcher, RunRequest
from gateway.automation.scheduler import Scheduler, SchedulerSettings
from gateway.automation.store import AutomationStore
from sessions.input_message import as_input
from tests.sessions.conftest import store_url
from tests.sessions.manager_support import Harness, HarnessFactory, harnesses

__all__ = ["harnesses", "store_url"]

HOUR = 3_600_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % HOUR


def ms(text: str) -> int:
    return round(datetime.fromisoformat(text).astimezone(UTC).timestamp() * 1000)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@dataclass
class Node:
    """One daemon's worth of automation over a harness: the scheduler and its store."""

    harness: Harness
    store: AutomationStore
    scheduler: Scheduler
    runner: JobRunner


def node(h: Harness, clock: Clock, *, on_removed: Callable[[str], None] | None = None) -> Node:
    store = AutomationStore(h.store.database, clock=clock)
    runner = JobRunner(store, Launcher(lambda: h.manager))
    settings = SchedulerSettings(missed_after_ms=60_000)
    scheduler = Scheduler(store, runner, settings=settings, clock=clock, on_removed=on_removed)
    return Node(h, store, scheduler, runner)


def job(origin: int, **extra: Any) -> Job:
    spec = {
        "name": "digest",
        "schedule": {"kind": "cron", "expr": "0 * * * *"},
        "payload": {"kind": "agentTurn", "message": "summarise the hour"},
        "sessionTarget": "isolated",
        **extra,
    }
    return new_job(spec, job_id="job1", now_ms=origin, default_agent="main")


async def slots(n: Node, job_id: str = "job1") -> list[int]:
    views = await n.store.run_views(job_id=job_id)
    return sorted(v.slot_ms for v in views if v.slot_ms is not None)


async def settled(n: Node, job_id: str = "job1", timeout: float = 15.0) -> list[str | None]:
    """Every run of the job once finished (whichever node ran it), their statuses, oldest
    first."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        views = await n.store.run_views(job_id=job_id)
        if all(view.finished for view in views):
            return [view.status for view in reversed(views)]
        assert asyncio.get_running_loop().time() < deadline, [v.input_status for v in views]
        await asyncio.sleep(0.02)


async def test_a_due_slot_fires_once_and_its_message_reaches_an_agent(harnesses: HarnessFactory) -> None:
    clock = Clock(T0)
    a = node(await harnesses(), clock)
    await a.store.add_job(job(T0))

    assert await a.scheduler.tick() == T0 + HOUR  # nothing due yet; the next slot
    clock.now = T0 + HOUR + 1500
    assert await a.scheduler.tick() == T0 + 2 * HOUR
    assert await a.scheduler.tick() == T0 + 2 * HOUR  # the same instant again: nothing new

    assert await slots(a) == [T0 + HOUR]
    assert await settled(a) == ["ok"]
    (view,) = await a.store.run_views(job_id="job1")
    assert view.id == f"cron:job1:{T0 + HOUR}" and view.trigger == "schedule"
    assert view.session_key == f"cron:job1:run:{T0 + HOUR}"
    session = await a.harness.manager.get(key=view.session_key)
    assert await a.harness.texts(session.id) == [
        ("user", "summarise the hour"),
        ("assistant", "echo: summarise the hour"),
    ]
    assert view.entry("digest")["summary"] == "echo: summarise the hour"


async def test_a_spring_forward_and_a_fall_back_day_in_berlin(harnesses: HarnessFactory) -> None:
    start = ms("2026-03-28T12:00:00+01:00")
    clock = Clock(start)
    a = node(await harnesses(), clock)
    await a.store.add_job(job(start, schedule={"kind": "cron", "expr": "30 2 * * *", "tz": "Europe/Berlin"}))

    clock.now = ms("2026-03-29T01:59:00+01:00")  # 01:59 CET, a minute before the clocks jump
    assert await a.scheduler.tick() == ms("2026-03-29T03:00:00+02:00")
    clock.now = ms("2026-03-29T03:00:02+02:00")
    await a.scheduler.tick()
    assert await slots(a) == [ms("2026-03-29T03:00:00+02:00")]

    clock.now = ms("2026-10-25T02:30:03+02:00")  # the first 02:30 (CEST)
    await a.scheduler.tick()
    clock.now = ms("2026-10-25T02:30:03+01:00")  # the second 02:30 (CET): not again
    assert await a.scheduler.tick() == ms("2026-10-26T02:30:00+01:00")
    fired = await slots(a)
    assert fired[-1] == ms("2026-10-25T02:30:00+02:00")
    assert ms("2026-10-25T02:30:00+01:00") not in fired
    # The seven months between the two days went by in one tick: catch-up `latest` ran only the
    # newest missed day, not all of them.
    assert len(fired) == 2


@pytest.mark.parametrize(("policy", "expected"), [("all", [2, 3, 4]), ("latest", [4]), ("none", [])])
async def test_catch_up_after_a_restart_across_due_times(
    harnesses: HarnessFactory, policy: str, expected: list[int]
) -> None:
    clock = Clock(T0 + HOUR + 1000)
    first = await harnesses()
    a = node(first, clock)
    await a.store.add_job(job(T0, catchUp=policy))
    await a.scheduler.tick()
    await settled(a)
    await harnesses.close(first)  # the daemon stops at 01:00:01...

    clock.now = T0 + 4 * HOUR + 30 * 60_000  # ...and starts again at 04:30: 02:00, 03:00, 04:00 missed
    b = node(await harnesses(), clock)
    await b.scheduler.tick()
    await b.scheduler.tick()

    assert await slots(b) == [T0 + HOUR] + [T0 + k * HOUR for k in expected]
    views = await b.store.run_views(job_id="job1")
    assert {v.trigger for v in views if v.slot_ms != T0 + HOUR} <= {"catch-up"}
    assert await settled(b) == ["ok"] * (1 + len(expected))


async def test_two_schedulers_racing_over_one_database_fire_each_slot_once(harnesses: HarnessFactory) -> None:
    clock = Clock(T0)
    a, b = node(await harnesses(), clock), node(await harnesses(), clock)
    await a.store.add_job(job(T0, schedule={"kind": "every", "everyMs": 60_000}))

    for minute in range(1, 7):
        clock.now = T0 + minute * 60_000 + 10
        await asyncio.gather(a.scheduler.tick(), b.scheduler.tick(), a.scheduler.tick())

    assert await slots(a) == [T0 + m * 60_000 for m in range(1, 7)]
    # Each slot's message was recorded once and ran once, on whichever node claimed it.
    assert await settled(a) == ["ok"] * 6
    for view in await a.store.run_views(job_id="job1"):
        session = await a.harness.manager.get(key=view.session_key)
        assert [role for role, _ in await a.harness.texts(session.id)] == ["user", "assistant"]


async def test_the_slot_and_its_input_commit_together_or_not_at_all(harnesses: HarnessFactory) -> None:
    clock = Clock(T0 + HOUR)
    a = node(await harnesses(), clock)
    await a.store.add_job(job(T0))
    await a.scheduler.tick()

    # Another scheduler naming its runs differently still cannot take the slot, and the input
    # it tried to record with it is rolled back.
    launcher = Launcher(lambda: a.harness.manager)
    claim = a.store.run_claim(
        job_id="job1",
        run_id="other-run",
        slot_ms=T0 + HOUR,
        trigger="schedule",
        session_key="agent:main:other",
    )
    request = RunRequest(
        run_id="other-run", agent_id="main", session_key="agent:main:other", message="x", claim=claim
    )
    with pytest.raises(SlotTaken):
        await launcher.launch(request)
    assert await a.harness.store.inputs.get("other-run") is None
    assert await slots(a) == [T0 + HOUR]
    await settled(a)


async def test_a_restart_at_the_due_time_runs_the_slot_once(harnesses: HarnessFactory) -> None:
    clock = Clock(T0 + HOUR + 200)
    first = await harnesses()
    a = node(first, clock)
    scheduled = job(T0)
    await a.store.add_job(scheduled)
    # The daemon recorded the slot's input and died before it could start the run: the claim
    # and the input commit, nothing else happens.
    run_id = f"cron:job1:{T0 + HOUR}"
    claim = a.store.run_claim(
        job_id="job1",
        run_id=run_id,
        slot_ms=T0 + HOUR,
        trigger="schedule",
        session_key=scheduled.session_key_for(str(T0 + HOUR)),
    )
    session = await first.manager.ensure_session(scheduled.session_key_for(str(T0 + HOUR)))
    payload = as_input("summarise the hour", run_id).dump()
    await first.store.inputs.record(
        run_id, session_id=session.id, payload=payload, claim=claim, run_id=run_id
    )
    await harnesses.close(first)

    clock.now = T0 + HOUR + 900  # back within the second: the slot is still on time
    b = node(await harnesses(), clock)  # its manager resumes the recorded input
    await b.scheduler.tick()
    await b.scheduler.tick()

    assert await slots(b) == [T0 + HOUR]
    assert await settled(b) == ["ok"]
    assert [(await b.harness.input(run_id)).status] == ["done"]


async def test_disabled_jobs_wait_and_enabling_skips_what_they_slept_through(
    harnesses: HarnessFactory,
) -> None:
    clock = Clock(T0)
    a = node(await harnesses(), clock)
    dormant = job(T0, enabled=False, catchUp="all")
    await a.store.add_job(dormant)
    clock.now = T0 + 3 * HOUR + 5
    assert await a.scheduler.tick() is None
    await a.store.save_job(patched(dormant, {"enabled": True}, now_ms=clock.now))
    await a.scheduler.tick()
    assert await slots(a) == []  # 01:00 to 03:00 went by while it was off
    clock.now = T0 + 4 * HOUR + 5
    await a.scheduler.tick()
    assert await slots(a) == [T0 + 4 * HOUR]
    await settled(a)


async def test_a_job_marked_delete_after_run_goes_once_its_run_succeeded(harnesses: HarnessFactory) -> None:
    clock = Clock(T0)
    removed: list[str] = []
    a = node(await harnesses(), clock, on_removed=removed.append)
    at = datetime.fromtimestamp((T0 + HOUR) / 1000, UTC).isoformat()
    await a.store.add_job(job(T0, schedule={"kind": "at", "at": at}, deleteAfterRun=True))
    clock.now = T0 + HOUR + 10
    await a.scheduler.tick()
    await settled(a)
    await a.scheduler.tick()
    assert removed == ["job1"]
    assert await a.store.jobs() == []


async def test_a_failed_run_is_an_error_in_its_job_history(harnesses: HarnessFactory) -> None:
    clock = Clock(T0 + HOUR + 5)
    a = node(await harnesses(), clock)
    await a.store.add_job(job(T0, payload={"kind": "agentTurn", "message": "!error the model fell over"}))
    await a.scheduler.tick()
    assert await settled(a) == ["error"]
    (view,) = await a.store.run_views(job_id="job1")
    assert view.error is not None and "the model fell over" in view.error
    assert view.entry()["status"] == "error" and view.entry()["deliveryStatus"] == "not-requested"
    latest = await a.store.latest_runs()
    assert latest["job1"].id == view.id
