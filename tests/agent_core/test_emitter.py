"""The emitter: deliveries to the sink one at a time, in the order the callers arrived."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import AgentEvent, TurnStartEvent
from agent_core._emitter import Emitter


class SlowSink:
    """An async sink that records each delivery's start and end, holding the first one until
    `gate` is set."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.gate = asyncio.Event()
        self.names: dict[int, str] = {}

    async def __call__(self, event: AgentEvent) -> None:
        name = self.names[id(event)]
        self.log.append(f"begin {name}")
        if name == "a":
            await self.gate.wait()
        await asyncio.sleep(0)
        self.log.append(f"end {name}")

    def event(self, name: str) -> AgentEvent:
        event = TurnStartEvent()
        self.names[id(event)] = name
        return event


async def test_deliveries_never_overlap_and_keep_arrival_order() -> None:
    sink = SlowSink()
    emit = Emitter(sink)
    tasks = [emit.start(sink.event(name)) for name in "abcd"]
    await asyncio.sleep(0.01)
    assert sink.log == ["begin a"]  # the others wait for their turn
    sink.gate.set()
    await asyncio.gather(*tasks)
    assert sink.log == [f"{step} {name}" for name in "abcd" for step in ("begin", "end")]


async def test_a_caller_cancelled_while_waiting_gives_up_its_place() -> None:
    sink = SlowSink()
    emit = Emitter(sink)
    first, second, third = (emit.start(sink.event(name)) for name in "abc")
    await asyncio.sleep(0.01)
    second.cancel()
    sink.gate.set()
    await asyncio.gather(first, third)
    with pytest.raises(asyncio.CancelledError):
        await second
    assert sink.log == ["begin a", "end a", "begin c", "end c"]


async def test_a_caller_cancelled_just_after_being_handed_the_turn_passes_it_on() -> None:
    sink = SlowSink()
    emit = Emitter(sink)
    later: list[asyncio.Task[None]] = []

    async def first() -> None:
        await emit(sink.event("a"))
        later[0].cancel()  # the turn was just handed to it; it has not run yet

    task = asyncio.ensure_future(first())
    await asyncio.sleep(0)
    later.extend(emit.start(sink.event(name)) for name in "bc")
    await asyncio.sleep(0.01)
    sink.gate.set()
    await asyncio.gather(task, later[1])
    with pytest.raises(asyncio.CancelledError):
        await later[0]
    assert sink.log == ["begin a", "end a", "begin c", "end c"]
    await emit(sink.event("d"))  # the turn is free again
    assert sink.log[-2:] == ["begin d", "end d"]
