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
the loop keeps; the rest is the loop's own work per event (event objects, the ordered emitter,
tool execution).

Two rows measure the message types themselves:

- bytes per parsed message: the memory (tracemalloc) a short assistant reply takes once parsed
  from its stored JSON, beside the length of that JSON (ratio: parsed / stored; target at most 2).
- context build: parsing 10,000 stored messages (a user prompt, a text reply, a tool call and
  its result, in turn) from their JSON text with `parse_message_json`, as a run's context is read,
  beside `json.loads` of the same texts (the floor of reading the JSON at all).
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

from agent_core import (
    AbortSignal,
    AgentContext,
    AgentEvent,
    AgentLoopConfig,
    AgentMessage,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    EventStream,
    TextContent,
    ToolCall,
    ToolResultMessage,
    ToolUpdateCallback,
    Usage,
    UserMessage,
    parse_message_json,
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


# --- the message types ------------------------------------------------------------------------


def _stored(message: AgentMessage) -> str:
    """A message's JSON text as the transcript stores it."""
    return json.dumps(message.dump(), separators=(",", ":"), ensure_ascii=False)


SHORT_REPLY = AssistantMessage(
    content=[TextContent(text="echo: what is the weather like in Paris today?")],
    api="faux",
    provider="faux",
    model="echo",
    usage=Usage(input=24, output=12, total_tokens=36),
)
CONTEXT_MIX: list[AgentMessage] = [
    UserMessage(content=[TextContent(text="please look at file number 7 and tell me")]),
    SHORT_REPLY,
    AssistantMessage(
        content=[TextContent(text="calling"), ToolCall(id="call-1", name="read", arguments={"path": "a.py"})],
        api="faux",
        provider="faux",
        model="echo",
        stop_reason="toolUse",
    ),
    ToolResultMessage(
        tool_call_id="call-1", tool_name="read", content=[TextContent(text="print('hi')\n" * 3)]
    ),
]


def _parsed_bytes(count: int) -> Row:
    """Memory held per parsed short reply, beside the length of its stored JSON."""
    text = _stored(SHORT_REPLY)
    parsed: list[AgentMessage | None] = [None] * count
    parse_message_json(text)  # warm-up: decoder caches, interned names
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for index in range(count):
            parsed[index] = parse_message_json(text)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stored = len(text.encode())
    return Row(
        "bytes per parsed message",
        f"short assistant reply ({stored} B of JSON)",
        (after - before) / count,
        "B",
        "its stored JSON",
        stored,
    )


def _context_build(entries: int, repeats: int) -> Row:
    """Milliseconds to parse a context of `entries` stored messages, beside `json.loads`."""
    texts = [_stored(CONTEXT_MIX[i % len(CONTEXT_MIX)]) for i in range(entries)]
    builds, loads = [], []
    for _ in range(repeats):
        # Each side starts from the same heap (the other's result freed and collected), so that
        # neither pays for collecting what the other built.
        gc.collect()
        start = time.perf_counter()
        context = [parse_message_json(text) for text in texts]
        builds.append((time.perf_counter() - start) * 1000)
        assert len(context) == entries
        del context
        gc.collect()
        start = time.perf_counter()
        raw = [json.loads(text) for text in texts]
        loads.append((time.perf_counter() - start) * 1000)
        assert len(raw) == entries
        del raw
    return Row(
        "context build (parse stored JSON)",
        f"{entries:,} entries",
        median(builds),
        "ms",
        "json.loads",
        median(loads),
        median([b / j for b, j in zip(builds, loads, strict=True)]),
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
        rows = [await _row(faux, shape, repeats) for shape in shapes]
    finally:
        faux.unregister()
    rows.append(_parsed_bytes(200 if quick else 2_000))
    rows.append(_context_build(1_000 if quick else 10_000, 1 if quick else 7))
    return rows


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
