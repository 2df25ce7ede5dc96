"""The pacer: one scheduler advancing every faux stream of a loop, with each stream's own pace."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from agent_core import AbortController, Context, StreamOptions, UserMessage
from agent_core.models import resolve_model
from agent_core.providers import stream_simple
from agent_core.providers._pacer import _PACERS, COALESCE_S, Pacer, Steps, running_pacer


def _ticker(log: list[tuple[str, float]], name: str, delays: list[float]) -> Steps:
    """Steps that record (name, loop time) and then wait each of `delays` in turn."""
    loop = asyncio.get_running_loop()
    log.append((name, loop.time()))
    for delay in delays:
        yield delay
        log.append((name, loop.time()))


async def test_each_step_comes_when_its_stream_schedule_says_never_early() -> None:
    pacer = running_pacer()
    log: list[tuple[str, float]] = []
    fast, slow = [0.01] * 5, [0.025] * 3
    await asyncio.gather(pacer.drive(_ticker(log, "fast", fast)), pacer.drive(_ticker(log, "slow", slow)))
    for name, delays in (("fast", fast), ("slow", slow)):
        times = [t for n, t in log if n == name]
        assert len(times) == len(delays) + 1
        for index, at in enumerate(times[1:], start=1):
            assert at >= times[0] + sum(delays[:index]) - COALESCE_S
    assert len(pacer) == 0


async def test_streams_of_one_pace_share_their_wake_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    pacer = Pacer(loop)
    timers = 0
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        nonlocal timers
        timers += 1
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    log: list[tuple[str, float]] = []
    streams, steps = 20, 5
    await asyncio.gather(*(pacer.drive(_ticker(log, f"s{i}", [0.02] * steps)) for i in range(streams)))
    assert len(log) == streams * (steps + 1)
    # One timer per tick for all twenty streams (a stream of its own per timer would need 100).
    assert timers <= 2 * steps


async def test_zero_waits_take_turns_one_step_per_stream_per_loop_iteration() -> None:
    order: list[str] = []

    def steps(name: str) -> Steps:
        for _ in range(3):
            order.append(name)
            yield 0

    pacer = running_pacer()
    await asyncio.gather(pacer.drive(steps("a")), pacer.drive(steps("b")))
    assert order == ["a", "b", "a", "b", "a", "b"]


async def test_steps_run_from_the_scheduler_not_from_a_task_per_stream() -> None:
    tasks: list[asyncio.Task[Any] | None] = []

    def steps() -> Steps:
        for delay in (0.0, 0.005, 0.0):
            tasks.append(asyncio.current_task())
            yield delay
        tasks.append(asyncio.current_task())

    await running_pacer().drive(steps())
    # The first step runs in the driving task; every later one in a pacer callback.
    assert tasks[0] is not None and tasks[1:] == [None, None, None]


async def test_an_abort_wakes_a_waiting_stream_at_once() -> None:
    controller = AbortController()
    resumed: list[bool] = []

    def steps() -> Steps:
        yield 600.0
        resumed.append(controller.signal.aborted)

    pacer = running_pacer()
    driving = asyncio.ensure_future(pacer.drive(steps(), controller.signal))
    await asyncio.sleep(0.01)
    controller.abort()
    await asyncio.wait_for(driving, 5)
    assert resumed == [True]


async def test_cancelling_the_driver_closes_the_steps_and_forgets_the_stream() -> None:
    closed: list[bool] = []

    def steps() -> Steps:
        try:
            while True:
                yield 0.005
        finally:
            closed.append(True)

    pacer = running_pacer()
    driving = asyncio.ensure_future(pacer.drive(steps()))
    await asyncio.sleep(0.02)
    assert len(pacer) == 1
    driving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driving
    assert closed == [True] and len(pacer) == 0


async def test_a_failing_step_raises_from_drive() -> None:
    def steps() -> Iterator[float]:
        yield 0.001
        raise ValueError("step failed")

    with pytest.raises(ValueError, match="step failed"):
        await running_pacer().drive(steps())  # type: ignore[arg-type]


async def test_concurrent_echo_streams_keep_their_own_words_and_pace() -> None:
    model = resolve_model("faux/echo").model_copy(update={"compat": {"paceMs": 5}})

    async def ask(index: int) -> list[str]:
        context = Context(messages=[UserMessage(content=f"!long {index}")])
        stream = stream_simple(model, context, StreamOptions())
        return [e.delta async for e in stream if e.type == "text_delta"]  # type: ignore[union-attr]

    answers = await asyncio.gather(*(ask(n) for n in range(1, 30)))
    for n, deltas in enumerate(answers, start=1):
        assert "".join(deltas) == " ".join(f"w{i}" for i in range(1, n + 1))
        assert len(deltas) == n
    assert len(running_pacer()) == 0


def test_a_pacer_goes_away_with_its_event_loop() -> None:
    async def one_stream() -> None:
        def steps() -> Steps:
            yield 0.001

        await running_pacer().drive(steps())

    gc.collect()
    before = len(_PACERS)
    for _ in range(3):
        asyncio.run(one_stream())
    gc.collect()
    assert len(_PACERS) <= before
