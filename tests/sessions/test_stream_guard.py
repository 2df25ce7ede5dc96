"""The guarded model stream: forwarded as the provider pushes, ended by an abort whatever the
provider does."""

from __future__ import annotations

import asyncio

from agent_core import (
    AbortController,
    AssistantMessage,
    AssistantMessageEventStream,
    DoneEvent,
    Model,
    StartEvent,
    TextContent,
    TextDeltaEvent,
)
from sessions.live import RunState
from sessions.stream_guard import STREAM_ABORTED_TEXT, guarded_stream

MODEL = Model(id="m", api="test", provider="test")


def _partial() -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text="")], api="test", provider="test", model="m")


async def _settle(run: RunState) -> None:
    await asyncio.gather(*run.pumps, return_exceptions=True)


async def test_events_reach_the_guarded_stream_as_the_provider_pushes_them() -> None:
    run = RunState(run_id="r", prompts=[], input_keys=[])
    inner = AssistantMessageEventStream()
    outer = guarded_stream(lambda: inner, MODEL, None, run)
    await asyncio.sleep(0)  # the pump starts listening
    partial = _partial()
    inner.push(StartEvent(partial=partial))
    inner.push(TextDeltaEvent(content_index=0, delta="hi", partial=partial))
    assert len(outer) == 2  # no task had to run in between
    final = AssistantMessage(content=[TextContent(text="hi")], api="test", provider="test", model="m")
    inner.push(DoneEvent(reason="stop", message=final))
    assert [e.type async for e in outer] == ["start", "text_delta", "done"]
    assert await outer.result() is final
    await _settle(run)
    assert not run.pumps


async def test_an_abort_ends_the_stream_even_when_the_provider_ignores_it() -> None:
    run = RunState(run_id="r", prompts=[], input_keys=[])
    controller = AbortController()
    inner = AssistantMessageEventStream()
    stopped = asyncio.Event()

    async def deaf_provider() -> None:
        inner.push(StartEvent(partial=_partial()))
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    inner.start(deaf_provider())
    outer = guarded_stream(lambda: inner, MODEL, controller.signal, run)
    seen = []
    async for event in outer:
        seen.append(event.type)
        if event.type == "start":
            controller.abort()
    assert seen == ["start", "error"]
    final = await outer.result()
    assert (final.stop_reason, final.error_message) == ("aborted", STREAM_ABORTED_TEXT)
    await _settle(run)
    async with asyncio.timeout(5):
        await stopped.wait()  # the provider's task was cancelled with the pump


async def test_a_provider_that_raises_ends_the_stream_with_its_error() -> None:
    run = RunState(run_id="r", prompts=[], input_keys=[])

    def broken() -> AssistantMessageEventStream:
        raise RuntimeError("no connection")

    outer = guarded_stream(broken, MODEL, None, run)
    final = await outer.result()
    assert (final.stop_reason, final.error_message) == ("error", "no connection")
    await _settle(run)
