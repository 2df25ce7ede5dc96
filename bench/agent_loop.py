"""Agent loop overhead: events per second through `run_agent_loop`, beside a bare `EventStream`.

    .venv/bin/python -m bench.agent_loop            # full run (about ten seconds)
    .venv/bin/python -m bench.agent_loop --quick    # smoke run, well under a second

Each configuration scripts one run with a registered faux provider (no pacing, one 4-character
chunk per text delta): an assistant message of K text deltas and T tool calls to a trivial tool
(run in parallel), then, when T > 0, a one-word final answer. The loop's events go to a sink
that only counts them. The value is events emitted per second (median of the repeats).

Baseline: the same number of events pushed through a bare `agent_core.EventStream` by a producer
task that yields to the event loop after each push (as the faux provider does between chunks)
and consumed with `async for`: the floor of moving an event from one task to another. The ratio
(loop rate / bare rate, the median over side-by-side pairs of samples) is the share of the floor
the loop keeps; the rest is the loop's own work per event (partial-message snapshots, event
objects, the ordered emitter, tool execution).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from agent_core import (
    AbortSignal,
    AgentContext,
    AgentEvent,
    AgentLoopConfig,
    AgentTool,
    AgentToolResult,
    EventStream,
    TextContent,
    ToolUpdateCallback,
    UserMessage,
    run_agent_loop,
)
from agent_core.providers import (
    FauxProvider,
    faux_assistant_message,
    faux_text,
    faux_tool_call,
    register_faux_provider,
)
from bench._report import Row, median, quick_main

CHUNK_CHARS = 4  # token_size (1, 1): one 4-character chunk per delta


@dataclass(frozen=True)
class Shape:
    deltas: int
    tools: int

    @property
    def label(self) -> str:
        return f"K={self.deltas:,} deltas, T={self.tools} tools"


async def _noop(
    tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
) -> AgentToolResult:
    return AgentToolResult(content=[TextContent(text="ok")])


NOOP = AgentTool(
    name="noop",
    label="No-op",
    description="Does nothing.",
    parameters={"type": "object", "properties": {}},
    execute=_noop,
)


def _script(faux: FauxProvider, shape: Shape) -> None:
    blocks: list[Any] = [faux_text("x" * (CHUNK_CHARS * shape.deltas))] if shape.deltas else []
    blocks += [faux_tool_call("noop", {}, id=f"call-{i}") for i in range(shape.tools)]
    steps = [faux_assistant_message(blocks, stop_reason="toolUse" if shape.tools else "stop")]
    if shape.tools:
        steps.append(faux_assistant_message("done"))
    faux.set_responses(steps)


async def _loop_run(faux: FauxProvider, shape: Shape) -> tuple[int, float]:
    """One scripted run through the loop: (events emitted, seconds)."""
    _script(faux, shape)
    count = 0

    def sink(event: AgentEvent) -> None:
        nonlocal count
        count += 1

    context = AgentContext(system_prompt="bench", tools=[NOOP])
    config = AgentLoopConfig(model=faux.model)
    prompt = UserMessage(content=[TextContent(text="go")])
    start = time.perf_counter()
    await run_agent_loop([prompt], context, config, sink)
    return count, time.perf_counter() - start


async def _bare_run(events: int) -> float:
    """`events` pushes through a bare EventStream, one task to another: seconds."""
    stream: EventStream[int, int] = EventStream(lambda n: n == events - 1, lambda n: n)

    async def produce() -> None:
        for n in range(events):
            stream.push(n)
            await asyncio.sleep(0)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        group.create_task(produce())
        received = 0
        async for _ in stream:
            received += 1
    elapsed = time.perf_counter() - start
    assert received == events, (received, events)
    return elapsed


async def _row(faux: FauxProvider, shape: Shape, repeats: int) -> Row:
    events, _ = await _loop_run(faux, shape)  # warm-up; also fixes the event count
    loop_rates, bare_rates = [], []
    for _ in range(repeats):
        emitted, seconds = await _loop_run(faux, shape)
        assert emitted == events, (emitted, events)
        loop_rates.append(emitted / seconds)
        bare_rates.append(events / await _bare_run(events))
    return Row(
        f"loop events/s ({events:,} events/run)",
        shape.label,
        median(loop_rates),
        "/s",
        "bare EventStream",
        median(bare_rates),
        median([lr / br for lr, br in zip(loop_rates, bare_rates, strict=True)]),
    )


async def run(quick: bool) -> list[Row]:
    shapes = (
        [Shape(100, 0), Shape(100, 5)]
        if quick
        else [Shape(1000, 0), Shape(1000, 10), Shape(100, 100), Shape(10_000, 0)]
    )
    repeats = 1 if quick else 21
    faux = register_faux_provider(token_size=(1, 1))
    try:
        return [await _row(faux, shape, repeats) for shape in shapes]
    finally:
        faux.unregister()


def main(argv: list[str] | None = None) -> None:
    quick_main(
        argv,
        prog="python -m bench.agent_loop",
        doc=__doc__,
        quick_help="a fast smoke run with small runs",
        run=run,
    )


if __name__ == "__main__":
    main()
