"""Inputs through `SessionManager`: idempotency keys, queue modes while a run is active, and one
recorded outcome for every accepted input."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest

from agent_core import (
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    ErrorEvent,
    Model,
    StartEvent,
    StreamOptions,
)
from agent_core.providers import stream_simple
from sessions.errors import InvalidRequest
from sessions.input_ledger import FINAL_INPUT_STATUSES
from tests.sessions.manager_support import (
    FAST,
    Harness,
    HarnessFactory,
    gated_tool,
    harnesses,
    tools_factory,
)

__all__ = ["harnesses"]


async def test_a_repeated_key_never_runs_twice(harnesses: HarnessFactory) -> None:
    h = await harnesses(directory=None)
    session = await h.session()
    first = await h.send(session, "!sleep 100 once", "idem-1")
    assert first.status == "started"
    again = await h.send(session, "!sleep 100 once", "idem-1")
    assert again.status == "in_flight" and again.run_id == "idem-1"
    assert (await h.wait("idem-1"))["status"] == "ok"
    done = await h.send(session, "!sleep 100 once", "idem-1")
    assert done.status == "ok" and done.result is not None and done.result["text"] == "echo: once"
    assert [t for t in await h.texts(session.id) if t[0] == "user"] == [("user", "!sleep 100 once")]

    # After a restart the stored outcome answers; nothing runs again.
    await harnesses.close(h)
    after = await harnesses()
    again = await after.send(session, "!sleep 100 once", "idem-1")
    assert (
        again.status == "ok"
        and again.result is not None
        and again.result["terminationReason"] == "no_tool_calls"
    )
    assert await after.manager.wait_run("idem-1", 1) == again.result
    assert len([t for t in await after.texts(session.id) if t[0] == "user"]) == 1
    runs = [e for e in await after.events(session.id) if e.type == "agent.started"]
    assert len(runs) == 1


@pytest.mark.parametrize(
    ("message", "outcome"), [("!error broken", "error"), ("!sleep 20000 abort me", "aborted")]
)
async def test_stored_failures_answer_repeats_after_a_restart(
    harnesses: HarnessFactory, message: str, outcome: str
) -> None:
    h = await harnesses()
    session = await h.session()
    await h.send(session, message, "fail-1")
    if outcome == "aborted":
        await h.wait_for_event(session.id, "message.started", role="assistant")
        await h.manager.abort(session.id)
    assert (await h.wait("fail-1"))["status"] == outcome
    await harnesses.close(h)
    after = await harnesses()
    assert (await after.send(session, message, "fail-1")).status == outcome


async def test_an_unknown_queue_mode_is_refused(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session()
    with pytest.raises(InvalidRequest):
        await h.send(session, "hi", "q-1", mode="shout")
    assert await h.store.inputs.get("q-1") is None


async def _gated(harnesses: HarnessFactory, **kwargs: Any) -> tuple[Harness, asyncio.Event, asyncio.Event]:
    gate, entered = asyncio.Event(), asyncio.Event()
    h = await harnesses(tools=tools_factory(gated_tool(gate, entered)), **kwargs)
    return h, gate, entered


async def test_steer_is_injected_at_the_next_model_boundary(harnesses: HarnessFactory) -> None:
    h, gate, entered = await _gated(harnesses)
    session = await h.session()
    await h.send(session, '!tool gate {"text": "tool done"}', "st-1")
    await asyncio.wait_for(entered.wait(), 10)
    steer = await h.send(session, "change of plan", "st-2", mode="steer")
    assert steer.status == "started" and steer.disposition == "steered"
    assert (await h.input("st-2")).status == "steered"
    gate.set()
    assert (await h.wait("st-1"))["text"] == "echo: change of plan"
    assert (await h.wait("st-2"))["status"] == "ok"
    assert await h.texts(session.id) == [
        ("user", '!tool gate {"text": "tool done"}'),
        ("assistant", "call:gate"),
        ("toolResult", "tool done"),
        ("user", "change of plan"),
        ("assistant", "echo: change of plan"),
    ]
    record = await h.store.inputs.get("st-2")
    assert record is not None and (record.status, record.run_id) == ("done", "st-1")
    assert len([e for e in await h.check_log(session.id) if e.type == "agent.started"]) == 1


async def test_followup_becomes_a_new_turn_of_the_same_run(harnesses: HarnessFactory) -> None:
    h, gate, entered = await _gated(harnesses)
    session = await h.session()
    await h.send(session, '!tool gate {"text": "first"}', "fu-1")
    await asyncio.wait_for(entered.wait(), 10)
    follow = await h.send(session, "second", "fu-2", mode="followup")
    assert follow.disposition == "followup"
    gate.set()
    await h.wait("fu-1")
    assert (await h.wait("fu-2"))["status"] == "ok"
    assert await h.texts(session.id) == [
        ("user", '!tool gate {"text": "first"}'),
        ("assistant", "call:gate"),
        ("toolResult", "first"),
        ("assistant", "echo: first"),
        ("user", "second"),
        ("assistant", "echo: second"),
    ]
    record = await h.store.inputs.get("fu-2")
    assert record is not None and (record.status, record.run_id) == ("done", "fu-1")


@pytest.mark.parametrize("release_before_window", [False, True])
async def test_collect_merges_messages_of_the_quiet_window(
    harnesses: HarnessFactory, release_before_window: bool
) -> None:
    settings = msgspec.structs.replace(FAST, collect_window_s=0.5)
    h, gate, entered = await _gated(harnesses, settings=settings)
    session = await h.session()
    await h.send(session, '!tool gate {"text": "busy"}', "co-0")
    await asyncio.wait_for(entered.wait(), 10)
    for n in range(1, 4):
        answer = await h.send(session, f"part {n}", f"co-{n}", mode="collect")
        assert answer.disposition == "followup"
    if release_before_window:
        gate.set()  # the run ends first; the merged message starts the next run
        await h.wait("co-0")
    else:
        await asyncio.sleep(0.8)  # the window closes while the run still waits for its tool
        gate.set()
    for n in range(4):
        assert (await h.wait(f"co-{n}"))["status"] == "ok"
    users = [text for role, text in await h.texts(session.id) if role == "user"]
    assert users == ['!tool gate {"text": "busy"}', "part 1\n\npart 2\n\npart 3"]
    assert (await h.texts(session.id))[-1] == ("assistant", "echo: part 1\n\npart 2\n\npart 3")
    run_ids = {(await h.input(f"co-{n}")).run_id for n in range(1, 4)}
    assert len(run_ids) == 1
    assert (run_ids == {"co-0"}) is not release_before_window
    await h.check_log(session.id)


async def test_interrupt_aborts_the_run_and_runs_the_newest_losing_nothing(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session()
    await h.send(session, "!sleep 20000 first", "in-1")
    await h.wait_for_event(session.id, "message.started", role="assistant")
    await h.send(session, "queued before", "in-2", mode="followup")
    answer = await h.send(session, "newest", "in-3", mode="interrupt")
    assert answer.disposition == "queued"

    first = await h.wait("in-1")
    assert first["status"] == "aborted" and first["terminationReason"] == "aborted"
    assert (await h.wait("in-3"))["status"] == "ok"
    assert (await h.wait("in-2"))["status"] == "ok"
    texts = await h.texts(session.id)
    assert ("assistant", "echo: newest") in texts
    assert ("assistant", "echo: queued before") in texts
    assert [t for t in texts if t[0] == "user"] == [
        ("user", "!sleep 20000 first"),
        ("user", "newest"),
        ("user", "queued before"),
    ]
    stored = await h.check_log(session.id)
    assert [e.payload["terminationReason"] for e in stored if e.type == "agent.finished"] == [
        "aborted",
        "no_tool_calls",
    ]


def _error_after_gate(gate: asyncio.Event, started: asyncio.Event) -> Any:
    """First call: starts a reply, waits for `gate`, then fails (so the run ends without asking
    for steering again). Later calls: the faux provider."""
    calls = 0

    async def stream_fn(
        model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        nonlocal calls
        calls += 1
        if calls > 1:
            return stream_simple(model, context, options)
        stream = AssistantMessageEventStream()
        partial = AssistantMessage(api=model.api, provider=model.provider, model=model.id)
        stream.push(StartEvent(partial=partial))
        started.set()
        await gate.wait()
        final = msgspec.structs.replace(partial, stop_reason="error", error_message="upstream failed")
        stream.push(ErrorEvent(reason="error", error=final))
        stream.end(final)
        return stream

    return stream_fn


async def test_a_steer_too_late_for_its_run_becomes_the_next_run(harnesses: HarnessFactory) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    h = await harnesses(stream_fn=_error_after_gate(gate, started))
    session = await h.session()
    await h.send(session, "first", "late-1")
    await asyncio.wait_for(started.wait(), 10)
    assert (await h.send(session, "steer me", "late-2", mode="steer")).disposition == "steered"
    gate.set()
    assert (await h.wait("late-1"))["status"] == "error"
    second = await h.wait("late-2")
    assert second["status"] == "ok" and second["text"] == "echo: steer me"
    record = await h.store.inputs.get("late-2")
    assert record is not None and record.status == "done" and record.run_id != "late-1"
    await h.check_log(session.id)


async def test_messages_for_a_run_that_has_not_started_join_it(harnesses: HarnessFactory) -> None:
    settings = msgspec.structs.replace(FAST, max_concurrent_runs=1)
    h, gate, entered = await _gated(harnesses, settings=settings)
    busy = await h.session("agent:main:busy")
    waiting = await h.session("agent:main:waiting")
    await h.send(busy, '!tool gate {"text": "hold the slot"}', "j-0")
    await asyncio.wait_for(entered.wait(), 10)
    await h.send(waiting, "one", "j-1")
    answers = [
        await h.send(waiting, "two", "j-2", mode="steer"),
        await h.send(waiting, "three", "j-3", mode="collect"),
    ]
    assert [a.disposition for a in answers] == ["queued", "queued"]
    gate.set()
    for key in ("j-1", "j-2", "j-3"):
        assert (await h.wait(key))["status"] == "ok"
    assert [t for t in await h.texts(waiting.id) if t[0] == "user"] == [
        ("user", "one"),
        ("user", "two"),
        ("user", "three"),
    ]
    assert len([e for e in await h.check_log(waiting.id) if e.type == "agent.started"]) == 1


async def test_every_accepted_input_ends_in_exactly_one_outcome(harnesses: HarnessFactory) -> None:
    """Random traffic in every queue mode, with aborts, over three sessions."""
    rng = random.Random(20240611)
    settings = msgspec.structs.replace(FAST, collect_window_s=0.02, max_concurrent_runs=2)
    h = await harnesses(settings=settings)
    sessions = [await h.session(f"agent:main:fuzz-{n}") for n in range(3)]
    keys: dict[str, str] = {}
    for n in range(40):
        session = rng.choice(sessions)
        mode = rng.choice(["steer", "followup", "collect", "interrupt", None])
        text = rng.choice([f"!sleep {rng.randint(1, 30)} msg {n}", f"msg {n}", f"!long {rng.randint(1, 20)}"])
        key = f"fz-{n}"
        await h.send(session, text, key, mode=mode)
        keys[key] = session.id
        if rng.random() < 0.1:
            await h.manager.abort(session.id)
        await asyncio.sleep(rng.random() * 0.01)
    outcomes = {key: await h.wait(key) for key in keys}
    assert all(o["status"] in ("ok", "aborted", "error") for o in outcomes.values())
    for key in keys:
        record = await h.store.inputs.get(key)
        assert record is not None and record.status in FINAL_INPUT_STATUSES
    for session in sessions:
        await h.check_log(session.id)
        # Each input's text reached the transcript exactly once (alone or merged).
        users = [m for m in await h.messages(session.id) if m["role"] == "user"]
        seen = [k for m in users for k in (m.get("mergedKeys") or [m.get("idempotencyKey")])]
        assert sorted(seen) == sorted(k for k, sid in keys.items() if sid == session.id)
    assert h.manager.running_count() == 0
