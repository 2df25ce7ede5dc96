"""EventStream semantics (pi-ai's), including the `fail()` extension the loop relies on."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import AssistantMessageEventStream, DoneEvent, ErrorEvent, EventStream, StartEvent
from tests.agent_core._scripted import assistant, text


def stream_of_strings() -> EventStream[str, str]:
    return EventStream(lambda e: e == "done", lambda e: f"result of {e}")


async def collect(stream: EventStream[str, str]) -> list[str]:
    return [event async for event in stream]


async def test_completing_event_is_delivered_sets_the_result_and_later_pushes_are_dropped() -> None:
    stream = stream_of_strings()
    stream.push("a")
    stream.push("done")
    stream.push("late")
    assert stream.done
    assert len(stream) == 2
    assert await collect(stream) == ["a", "done"]
    assert await stream.result() == "result of done"


async def test_consumer_waits_for_events_pushed_later() -> None:
    stream = stream_of_strings()
    consumer = asyncio.ensure_future(collect(stream))
    await asyncio.sleep(0)
    assert not consumer.done()
    stream.push("a")
    await asyncio.sleep(0)
    stream.push("done")
    assert await consumer == ["a", "done"]


async def test_end_with_a_result_closes_the_stream() -> None:
    stream = stream_of_strings()
    waiter = asyncio.ensure_future(stream.result())
    stream.push("a")
    stream.end("explicit")
    assert await collect(stream) == ["a"]
    assert await waiter == "explicit"
    stream.push("b")
    assert len(stream) == 0


async def test_end_without_a_result_stops_iteration_but_leaves_result_pending() -> None:
    stream = stream_of_strings()
    stream.end()
    assert await collect(stream) == []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await stream.result()


async def test_fail_raises_after_the_queued_events_and_from_result() -> None:
    stream = stream_of_strings()
    waiter = asyncio.ensure_future(stream.result())
    stream.push("a")
    stream.fail(RuntimeError("loop broke"))
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="loop broke"):
        async for event in stream:
            seen.append(event)
    assert seen == ["a"]
    with pytest.raises(RuntimeError, match="loop broke"):
        await waiter


async def test_fail_after_a_result_keeps_the_result() -> None:
    stream = stream_of_strings()
    stream.push("done")
    stream.fail(RuntimeError("too late"))
    assert await stream.result() == "result of done"


@pytest.mark.parametrize("kind", ["done", "error"])
async def test_assistant_stream_completes_on_done_or_error(kind: str) -> None:
    stream = AssistantMessageEventStream()
    final = assistant(text("x"), stop_reason="stop" if kind == "done" else "error", error_message=None)
    stream.push(StartEvent(partial=assistant()))
    stream.push(
        DoneEvent(reason="stop", message=final) if kind == "done" else ErrorEvent(reason="error", error=final)
    )
    assert [e.type async for e in stream] == ["start", kind]
    assert await stream.result() is final
