"""EventStream semantics (pi-ai's), including the `fail()` extension the loop relies on."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import (
    AgentCoreError,
    AssistantMessageEventStream,
    DoneEvent,
    ErrorEvent,
    EventStream,
    StartEvent,
)
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


# --- the producer task a stream owns ------------------------------------------------------------


class Producer:
    """A producer coroutine that pushes `items` (one loop tick apart; `pushed` is set after the
    last), then waits on `gate` (forever unless it is set), and records how it ended."""

    def __init__(self, stream: EventStream[str, str], *items: str) -> None:
        self.stream = stream
        self.items = items
        self.gate = asyncio.Event()
        self.pushed = asyncio.Event()
        self.ended = asyncio.Event()
        self.outcome = ""

    async def run(self) -> None:
        try:
            for item in self.items:
                self.stream.push(item)
                await asyncio.sleep(0)
            self.pushed.set()
            await self.gate.wait()
            self.outcome = "finished"
        except asyncio.CancelledError:
            self.outcome = "cancelled"
            raise
        finally:
            self.ended.set()


def started(*items: str) -> tuple[EventStream[str, str], Producer]:
    stream = stream_of_strings()
    producer = Producer(stream, *items)
    stream.start(producer.run())
    return stream, producer


async def test_aclose_cancels_a_running_producer_and_waits_for_it() -> None:
    stream, producer = started("a", "b")
    async for event in stream:
        if event == "b":
            break
    await stream.aclose()
    assert producer.outcome == "cancelled"
    assert not stream.producing
    await stream.aclose()  # idempotent


async def test_a_consumer_raising_inside_async_with_stops_the_producer() -> None:
    stream, producer = started("a")
    with pytest.raises(RuntimeError, match="consumer broke"):
        async with stream:
            async for _event in stream:
                raise RuntimeError("consumer broke")
    assert producer.outcome == "cancelled"
    assert not stream.producing


async def test_an_abandoned_iteration_cancels_the_producer_without_aclose() -> None:
    stream, producer = started("a")
    async for _event in stream:
        break  # the iterator is finalised by the event loop soon after
    async with asyncio.timeout(5):
        await producer.ended.wait()
    assert producer.outcome == "cancelled"


async def test_a_cancelled_consumer_cancels_the_producer() -> None:
    stream, producer = started("a")
    seen: list[str] = []

    async def consume() -> None:
        async for event in stream:
            seen.append(event)

    consumer = asyncio.ensure_future(consume())
    await producer.pushed.wait()
    await asyncio.sleep(0)
    assert seen == ["a"]  # the consumer is waiting for the next event
    consumer.cancel()
    await asyncio.wait({consumer})
    async with asyncio.timeout(5):
        await producer.ended.wait()
    assert producer.outcome == "cancelled"


async def test_a_producer_that_completed_the_stream_is_waited_for_never_cancelled() -> None:
    stream, producer = started("a", "done")
    async for event in stream:
        if event == "done":
            break
    asyncio.get_running_loop().call_soon(producer.gate.set)
    await stream.aclose()
    assert producer.outcome == "finished"


async def test_result_and_the_end_of_iteration_wait_for_the_producer_to_finish() -> None:
    stream, producer = started("a", "done")
    waiter = asyncio.ensure_future(stream.result())
    await producer.pushed.wait()
    await asyncio.sleep(0)
    assert stream.done and not waiter.done()  # completed, but the producer is still cleaning up
    producer.gate.set()
    assert await waiter == "result of done"
    assert producer.outcome == "finished"

    stream, producer = started("done")
    asyncio.get_running_loop().call_soon(producer.gate.set)
    assert await collect(stream) == ["done"]
    assert producer.outcome == "finished"


async def test_a_producer_that_ends_without_completing_fails_the_stream() -> None:
    stream = stream_of_strings()

    async def give_up() -> None:
        stream.push("a")

    stream.start(give_up())
    seen: list[str] = []
    with pytest.raises(AgentCoreError, match="producer ended without completing"):
        async for event in stream:
            seen.append(event)
    assert seen == ["a"]


async def test_a_producer_that_raises_fails_the_stream_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = stream_of_strings()

    async def explode() -> None:
        raise ValueError("producer bug")

    stream.start(explode(), name="exploding")
    with pytest.raises(ValueError, match="producer bug"):
        await stream.result()
    assert "stream producer exploding failed" in caplog.text


async def test_a_stream_has_at_most_one_producer() -> None:
    stream, producer = started("done")
    extra = Producer(stream)
    with pytest.raises(RuntimeError, match="already has a producer"):
        stream.start(extra.run())
    producer.gate.set()
    assert await stream.result() == "result of done"


# --- consuming by callback --------------------------------------------------------------------


async def test_a_listener_gets_the_queued_events_then_each_push_as_it_happens() -> None:
    stream = stream_of_strings()
    stream.push("a")
    seen: list[str] = []
    stream.listen(seen.append)
    assert seen == ["a"] and len(stream) == 0
    stream.push("b")
    assert seen == ["a", "b"]  # delivered by push itself, before anything else runs
    stream.push("done")
    stream.push("late")
    assert seen == ["a", "b", "done"]
    assert await stream.result() == "result of done"


async def test_a_stream_has_one_consumer_listener_or_iterator() -> None:
    stream = stream_of_strings()
    stream.listen(lambda _event: None)
    with pytest.raises(RuntimeError, match="already has a consumer"):
        stream.listen(lambda _event: None)
    iterated = stream_of_strings()
    consumer = asyncio.ensure_future(collect(iterated))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="already has a consumer"):
        iterated.listen(lambda _event: None)
    iterated.push("done")
    assert await consumer == ["done"]


async def test_abandon_cancels_the_producer_without_waiting_for_it() -> None:
    stream, producer = started("a")
    stream.listen(lambda _event: None)
    await producer.pushed.wait()
    stream.abandon()
    assert not producer.ended.is_set()  # cancelled, not yet finished
    async with asyncio.timeout(5):
        await producer.ended.wait()
    assert producer.outcome == "cancelled"
