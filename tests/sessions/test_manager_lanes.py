"""Serialisation and resources through `SessionManager`: one run at a time per session, the
global run limiter (with sub-agents), and live sessions that come and go."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
from typing import Any

import msgspec
import pytest

from agent_core import AbortSignal, AgentTool
from sessions.errors import LaneFull
from sessions.profiles import RunContext
from sessions.records import RunRecord
from tests.sessions.manager_support import (
    FAST,
    Directory,
    Harness,
    HarnessFactory,
    StreamLog,
    gated_tool,
    harnesses,
    tool,
    tools_factory,
)

__all__ = ["harnesses"]


async def _runs_of(h: Harness, keys: list[str]) -> list[RunRecord]:
    runs: dict[str, RunRecord] = {}
    for key in keys:
        record = await h.store.inputs.get(key)
        assert record is not None and record.run_id is not None
        run = await h.store.runs.get(record.run_id)
        assert run is not None
        runs[run.id] = run
    return sorted(runs.values(), key=lambda r: r.started_at)


async def test_runs_never_overlap_and_the_limiter_caps_concurrency(harnesses: HarnessFactory) -> None:
    log = StreamLog()
    settings = msgspec.structs.replace(FAST, max_concurrent_runs=2)
    h = await harnesses(settings=settings, stream_fn=log, directory=Directory(pace_ms=2))
    sessions = [await h.session(f"agent:main:lane-{n}") for n in range(4)]
    keys = []
    for round_ in range(3):
        for n, session in enumerate(sessions):
            key = f"lane-{n}-{round_}"
            await h.send(session, f"!long {10 + round_}", key, mode="followup")
            keys.append(key)
    for key in keys:
        assert (await h.wait(key))["status"] == "ok"
    assert log.max_per_session == 1
    assert log.max_total <= 2
    await h.wait_for(lambda: h.manager.limiter.active == 0)
    for session in sessions:
        await h.check_log(session.id)


async def test_the_limiter_holds_runs_beyond_the_cap_until_a_slot_frees(harnesses: HarnessFactory) -> None:
    gate = asyncio.Event()
    entered: list[str] = []

    async def hold(params: dict[str, Any], signal: AbortSignal | None) -> str:
        entered.append(str(params["text"]))
        await gate.wait()
        return str(params["text"])

    settings = msgspec.structs.replace(FAST, max_concurrent_runs=2)
    h = await harnesses(settings=settings, tools=tools_factory(tool("hold", hold)))
    for n in range(3):
        session = await h.session(f"agent:main:cap-{n}")
        await h.send(session, f'!tool hold {{"text": "s{n}"}}', f"cap-{n}")
    await h.wait_for(lambda: len(entered) == 2)
    await asyncio.sleep(0.1)
    assert len(entered) == 2
    assert (h.manager.limiter.active, h.manager.limiter.waiting) == (2, 1)
    assert h.manager.running_count() == 2
    gate.set()
    for n in range(3):
        assert (await h.wait(f"cap-{n}"))["status"] == "ok"
    assert sorted(entered) == ["s0", "s1", "s2"]
    await h.wait_for(lambda: h.manager.limiter.active == 0)


async def test_new_settings_change_the_run_cap_and_the_lane_depth_at_once(harnesses: HarnessFactory) -> None:
    gate = asyncio.Event()
    entered: list[str] = []

    async def hold(params: dict[str, Any], signal: AbortSignal | None) -> str:
        entered.append(str(params["text"]))
        await gate.wait()
        return str(params["text"])

    settings = msgspec.structs.replace(FAST, max_concurrent_runs=1, lane_depth=1)
    h = await harnesses(settings=settings, tools=tools_factory(tool("hold", hold)))
    first, second = await h.session("agent:main:cap-a"), await h.session("agent:main:cap-b")
    await h.send(first, '!tool hold {"text": "a"}', "cap-a")
    await h.send(second, '!tool hold {"text": "b"}', "cap-b")
    await h.wait_for(lambda: entered == ["a"] and h.manager.limiter.waiting == 1)
    with pytest.raises(LaneFull):
        await h.manager.inject(first.id, text="a note")

    h.manager.apply_settings(msgspec.structs.replace(settings, max_concurrent_runs=2, lane_depth=3))
    await h.wait_for(lambda: sorted(entered) == ["a", "b"])  # the waiting run got the new slot
    assert (h.manager.limiter.active, h.manager.limiter.waiting) == (2, 0)
    note = asyncio.create_task(h.manager.inject(first.id, text="a note"))  # waits on the lane
    await h.wait_for(lambda: h.manager.lanes.depth(first.id) == 2)

    h.manager.apply_settings(settings)
    with pytest.raises(LaneFull):
        await h.manager.inject(first.id, text="another note")
    with pytest.raises(LaneFull):
        await h.send(first, "refused", "cap-c")
    gate.set()
    for key in ("cap-a", "cap-b"):
        assert (await h.wait(key))["status"] == "ok"
    await note
    assert h.manager.settings.max_concurrent_runs == 1 and h.manager.limiter.limit == 1


async def test_interrupted_and_queued_runs_of_a_session_follow_each_other(harnesses: HarnessFactory) -> None:
    h = await harnesses(directory=Directory(pace_ms=2))
    session = await h.session()
    keys = []
    for n in range(5):
        key = f"burst-{n}"
        await h.send(session, f"!long {20 + n}", key, mode="interrupt")
        keys.append(key)
        await asyncio.sleep(0.01)
    for key in keys:
        await h.wait(key)
    assert (await h.wait(keys[-1]))["status"] == "ok"
    runs = await _runs_of(h, keys)
    for before, after in itertools.pairwise(runs):
        assert before.ended_at is not None and before.ended_at <= after.started_at
    stored = await h.check_log(session.id)
    starts = [e.seq for e in stored if e.type == "agent.started"]
    ends = [e.seq for e in stored if e.type == "agent.finished"]
    assert len(starts) == len(ends) == len(runs)
    assert all(s < e for s, e in zip(starts, ends, strict=True))
    assert all(e < s for e, s in zip(ends, starts[1:], strict=False))


async def test_lane_operations_wait_for_the_run(harnesses: HarnessFactory) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    h = await harnesses(tools=tools_factory(gated_tool(gate, entered)))
    session = await h.session()
    await h.send(session, '!tool gate {"text": "hold"}', "op-1")
    await asyncio.wait_for(entered.wait(), 10)
    inject = asyncio.create_task(h.manager.inject(session.id, text="a note"))
    await asyncio.sleep(0.05)
    assert not inject.done()
    gate.set()
    entry_id = await inject
    await h.wait("op-1")
    entries = [e for e in await h.transcript(session.id) if e.kind == "message"]
    assert entries[-1].id == entry_id and entries[-1].payload["content"][0]["text"] == "a note"
    await h.check_log(session.id)


def _spawner(box: dict[str, Any]) -> Any:
    """A tools factory whose `spawn` tool runs its text in a new sub-agent child session of the
    calling session and returns the child's answer."""

    def factory(ctx: RunContext) -> list[AgentTool]:
        async def spawn(params: dict[str, Any], signal: AbortSignal | None) -> str:
            h: Harness = box["h"]
            child = await h.store.tree.create_session(
                agent_id="main",
                key=f"{ctx.session.keys[0]}:subagent:{ctx.run_id}",
                kind="subagent",
                parent_id=ctx.session.id,
            )
            key = f"{ctx.run_id}/child"
            await h.send(child, str(params["text"]), key)
            outcome = await h.wait(key, timeout=10)
            return f"child said {outcome.get('text')}"

        return [tool("spawn", spawn)]

    return factory


async def test_subagents_do_not_deadlock_when_parents_hold_every_slot(harnesses: HarnessFactory) -> None:
    box: dict[str, Any] = {}
    settings = msgspec.structs.replace(FAST, max_concurrent_runs=2)
    h = await harnesses(settings=settings, tools=_spawner(box))
    box["h"] = h
    parents = [await h.session(f"agent:main:parent-{n}") for n in range(2)]
    for n, parent in enumerate(parents):
        await h.send(parent, f'!tool spawn {{"text": "task {n}"}}', f"p-{n}")
    deep = await h.session("agent:main:deep")
    inner = "!tool spawn " + json.dumps({"text": "deepest"})
    await h.send(deep, "!tool spawn " + json.dumps({"text": inner}), "p-deep")

    for n in range(2):
        outcome = await asyncio.wait_for(h.wait(f"p-{n}"), 10)
        assert outcome["text"] == f"echo: child said echo: task {n}"
    outcome = await asyncio.wait_for(h.wait("p-deep"), 10)
    assert outcome["text"] == "echo: child said echo: child said echo: deepest"
    # A run's outcome is recorded just before its slot is given back: wait for the release.
    await h.wait_for(lambda: h.manager.limiter.active == 0 and h.manager.limiter.waiting == 0)


async def test_aborting_a_run_that_waits_for_a_slot(harnesses: HarnessFactory) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    settings = msgspec.structs.replace(FAST, max_concurrent_runs=1)
    h = await harnesses(settings=settings, tools=tools_factory(gated_tool(gate, entered)))
    holder = await h.session("agent:main:holder")
    waiter = await h.session("agent:main:waiter")
    await h.send(holder, '!tool gate {"text": "hold"}', "w-0")
    await asyncio.wait_for(entered.wait(), 10)
    await h.send(waiter, "never answered", "w-1")
    assert await h.manager.abort(waiter.id) == ["w-1"]
    gate.set()
    outcome = await h.wait("w-1")
    assert outcome["status"] == "aborted" and outcome["terminationReason"] == "aborted"
    assert [m["role"] for m in await h.messages(waiter.id)] == ["user", "assistant"]
    assert (await h.messages(waiter.id))[-1]["stopReason"] == "aborted"
    assert (await h.wait("w-0"))["status"] == "ok"


async def test_stopping_leaves_waiting_inputs_for_the_restart(harnesses: HarnessFactory) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    settings = msgspec.structs.replace(FAST, max_concurrent_runs=1, abort_grace_s=0.2)
    h = await harnesses(settings=settings, tools=tools_factory(gated_tool(gate, entered)))
    holder = await h.session("agent:main:holder")
    waiter = await h.session("agent:main:waiter")
    await h.send(holder, '!tool gate {"text": "hold"}', "r-0")
    await asyncio.wait_for(entered.wait(), 10)
    await h.send(waiter, "after the restart", "r-1")
    await harnesses.close(h)

    after = await harnesses(settings=settings)
    assert (await after.input("r-1")).status in ("queued", "running", "done")
    outcome = await after.wait("r-1")
    assert outcome["status"] == "ok" and outcome["text"] == "echo: after the restart"
    held = await after.store.runs.get("r-0")
    assert held is not None and (held.status, held.termination_reason) == ("interrupted", "gateway_shutdown")
    gate.set()


async def test_live_sessions_are_capped_but_busy_ones_stay(harnesses: HarnessFactory) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    settings = msgspec.structs.replace(FAST, live_cap=1)
    h = await harnesses(settings=settings, tools=tools_factory(gated_tool(gate, entered)))
    busy = await h.session("agent:main:busy")
    await h.send(busy, '!tool gate {"text": "hold"}', "cap-busy")
    await asyncio.wait_for(entered.wait(), 10)
    others = [await h.session(f"agent:main:other-{n}") for n in range(3)]
    for n, session in enumerate(others):
        # The session just loaded is never the one evicted, even when every other one is busy.
        await h.send(session, f"!sleep 30 hello {n}", f"cap-{n}")
        await h.send(session, f"and more {n}", f"cap-{n}-more", mode="followup")
        assert (await h.wait(f"cap-{n}-more"))["status"] == "ok"
        assert h.manager.live_count() <= 2  # the busy one and the one in use
        await h.check_log(session.id)
    assert h.manager.active_run_ids(busy.id) == ["cap-busy"]
    assert h.manager.in_flight(busy.id) is not None
    gate.set()
    assert (await h.wait("cap-busy"))["status"] == "ok"
    await h.check_log(busy.id)
    # An evicted session picks up its event numbering from the database.
    await h.send(others[0], "back again", "cap-again")
    assert (await h.wait("cap-again"))["status"] == "ok"
    await h.check_log(others[0].id)
    assert h.manager.live_count() == 1


async def test_idle_live_sessions_and_lanes_do_not_accumulate(harnesses: HarnessFactory) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    settings = msgspec.structs.replace(FAST, live_idle_ttl_s=0.1)
    h = await harnesses(settings=settings, tools=tools_factory(gated_tool(gate, entered)))
    busy = await h.session("agent:main:busy")
    await h.send(busy, '!tool gate {"text": "hold"}', "ttl-busy")
    await asyncio.wait_for(entered.wait(), 10)
    for n in range(3):
        session = await h.session(f"agent:main:idle-{n}")
        await h.send(session, "hi", f"ttl-{n}")
        await h.wait(f"ttl-{n}")
    await h.wait_for(lambda: h.manager.live_count() == 1, timeout=5)
    await asyncio.sleep(0.3)
    assert h.manager.live_count() == 1  # the busy one stays however long it runs
    assert h.manager.active_run_ids(busy.id) == ["ttl-busy"]
    gate.set()
    await h.wait("ttl-busy")
    await h.wait_for(lambda: h.manager.live_count() == 0, timeout=5)
    gc.collect()
    assert len(h.manager.lanes) == 0
    assert h.manager.queue_depths() == {}
    assert h.manager.running_count() == 0
