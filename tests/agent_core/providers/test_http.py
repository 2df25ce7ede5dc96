"""Retries, timeouts and abort of the HTTP providers (the plumbing in providers/_http.py)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time

import pytest

from agent_core import AgentContext, AgentEvent, AgentLoopConfig, AgentOptions, run_agent_loop
from agent_core.abort import AbortController
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.llm import Context, Model, StreamOptions
from agent_core.messages import TextContent, UserMessage
from agent_core.providers import stream_simple
from agent_core.providers._common import running_producers
from agent_core.providers._http import backoff_delay_ms, server_retry_delay_ms
from tests.agent_core.providers.helpers import anthropic_model, collect, compact, openai_model, trace_context
from tests.agent_core.providers.llm_server import LLMServer, Reply, sse, status


def chunk(text: str) -> str:
    return "data: " + json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"


def anthropic_event(kind: str, **data: object) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


OK = sse(
    chunk("ok"), 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', "data: [DONE]\n\n"
)
CLEAN = [
    "start",
    "text_start ci=0",
    'text_delta ci=0 delta="ok"',
    'text_end ci=0 content="ok"',
    "done reason=stop",
]


async def run(server: LLMServer, **options: object) -> tuple[list[str], object]:
    opts = StreamOptions(api_key="k", **options)  # type: ignore[arg-type]
    events, final = await collect(stream_simple(openai_model(server.base_url), trace_context(), opts))
    return compact(events), final


async def test_500_then_ok_is_retried_invisibly(llm_server: LLMServer) -> None:
    llm_server.script(status(500, {"error": {"message": "boom"}}, {"retry-after-ms": "10"}), OK)
    events, _ = await run(llm_server)
    assert events == CLEAN
    assert len(llm_server.requests) == 2


async def test_429_honours_retry_after_ms(llm_server: LLMServer) -> None:
    llm_server.script(status(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "250"}), OK)
    events, _ = await run(llm_server)
    assert events == CLEAN
    first, second = llm_server.request_times
    assert second - first >= 0.24


async def test_500_honours_retry_after_seconds(llm_server: LLMServer) -> None:
    llm_server.script(status(503, {"error": {"message": "busy"}}, {"retry-after": "0.2"}), OK)
    events, _ = await run(llm_server)
    assert events == CLEAN
    first, second = llm_server.request_times
    assert second - first >= 0.19


async def test_retry_after_longer_than_the_maximum_fails_at_once(llm_server: LLMServer) -> None:
    llm_server.script(status(429, {"error": {"message": "rate limited"}}, {"retry-after": "120"}), OK)
    started = time.monotonic()
    events, final = await run(llm_server, max_retry_delay_ms=5000)
    assert time.monotonic() - started < 2
    assert events == ["error reason=error"]
    assert final.error_message == "Server requested 120s retry delay (max: 5s): 429 rate limited"  # type: ignore[attr-defined]
    assert len(llm_server.requests) == 1


async def test_retries_are_bounded(llm_server: LLMServer) -> None:
    fail = status(502, {"error": {"message": "bad gateway"}}, {"retry-after-ms": "1"})
    llm_server.script(fail, fail, fail, fail)
    events, final = await run(llm_server, max_retries=2)
    assert events == ["error reason=error"]
    assert final.error_message == "502 bad gateway"  # type: ignore[attr-defined]
    assert len(llm_server.requests) == 3


async def test_client_errors_and_should_retry_false_are_not_retried(llm_server: LLMServer) -> None:
    llm_server.script(status(400, {"error": {"message": "bad"}}), OK)
    _, final = await run(llm_server)
    assert final.error_message == "400 bad"  # type: ignore[attr-defined]
    assert len(llm_server.replies) == 1  # the second reply was never asked for
    llm_server.replies.clear()
    llm_server.script(status(500, {"error": {"message": "final"}}, {"x-should-retry": "false"}))
    _, final = await run(llm_server)
    assert final.error_message == "500 final"  # type: ignore[attr-defined]
    assert len(llm_server.requests) == 2


async def test_body_broken_before_its_first_byte_is_retried(llm_server: LLMServer) -> None:
    llm_server.script(Reply(headers={"content-type": "text/event-stream"}, chunks=[], ending="reset"), OK)
    events, _ = await run(llm_server)
    assert events == CLEAN
    assert len(llm_server.requests) == 2


async def test_connection_reset_mid_stream_is_an_error_with_partial_content(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk("part"), ending="reset"))
    events, final = await run(llm_server)
    assert events[-1] == "error reason=error"
    assert "text_end ci=0" not in " ".join(events)
    assert final.error_message.startswith("Connection error")  # type: ignore[attr-defined]
    assert final.content == [TextContent(text="part")]  # type: ignore[attr-defined]
    assert len(llm_server.requests) == 1


async def test_body_that_ends_early_is_an_error_not_a_hang(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk("half"), ending="close"))
    events, final = await asyncio.wait_for(run(llm_server), 5)
    assert events[-1] == "error reason=error"
    assert final.error_message.startswith("Connection error")  # type: ignore[attr-defined]


async def test_connection_refused_is_an_error() -> None:
    server = LLMServer()
    await server.start()
    url = server.base_url
    await server.aclose()
    opts = StreamOptions(api_key="k", max_retries=1)
    events, final = await collect(stream_simple(openai_model(url), trace_context(), opts))
    assert compact(events) == ["error reason=error"]
    assert final.error_message.startswith("Connection error")  # type: ignore[union-attr]


async def test_a_stalled_stream_times_out(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk("slow"), ending="stall"))
    started = time.monotonic()
    events, final = await run(llm_server, timeout_ms=300, max_retries=0)
    assert 0.25 < time.monotonic() - started < 3
    assert events[-1] == "error reason=error"
    assert final.error_message == "Request timed out"  # type: ignore[attr-defined]
    assert final.content == [TextContent(text="slow")]  # type: ignore[attr-defined]


async def test_abort_mid_stream_ends_promptly_with_partial_content(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk("one "), ending="stall"))
    controller = AbortController()
    stream = stream_simple(
        openai_model(llm_server.base_url),
        trace_context(),
        StreamOptions(api_key="k", signal=controller.signal),
    )
    events = []
    async for event in stream:
        events.append(event)
        if event.type == "text_delta":
            aborted_at = time.monotonic()
            controller.abort()
    final = await stream.result()
    assert time.monotonic() - aborted_at < 0.5
    # pi closes the open text block before the aborted error.
    assert compact(events) == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="one "',
        'text_end ci=0 content="one "',
        "error reason=aborted",
    ]
    assert (final.stop_reason, final.error_message) == ("aborted", "Request was aborted")
    assert final.content == [TextContent(text="one ")]
    for _ in range(50):
        if llm_server.disconnects:
            break
        await asyncio.sleep(0.01)
    assert llm_server.disconnects == 1


async def test_abort_from_another_task_while_waiting_for_the_response(llm_server: LLMServer) -> None:
    llm_server.script(Reply(header_delay=5, body=b"{}"))
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.1, controller.abort)
    started = time.monotonic()
    events, final = await run(llm_server, signal=controller.signal)
    assert time.monotonic() - started < 1
    assert events == ["error reason=aborted"]
    assert final.error_message == "Request was aborted"  # type: ignore[attr-defined]


async def test_abort_during_a_retry_wait(llm_server: LLMServer) -> None:
    llm_server.script(status(429, {"error": {"message": "later"}}, {"retry-after": "10"}), OK)
    controller = AbortController()
    asyncio.get_running_loop().call_later(0.1, controller.abort)
    started = time.monotonic()
    events, _ = await run(llm_server, signal=controller.signal, max_retry_delay_ms=60_000)
    assert time.monotonic() - started < 1
    assert events == ["error reason=aborted"]


async def test_signal_aborted_before_the_call(llm_server: LLMServer) -> None:
    controller = AbortController()
    controller.abort()
    events, final = await run(llm_server, signal=controller.signal)
    assert events == ["error reason=aborted"]
    assert final.error_message == "Request was aborted"  # type: ignore[attr-defined]
    assert llm_server.requests == []


async def test_anthropic_abort_mid_stream_keeps_the_open_block(llm_server: LLMServer) -> None:
    usage = {"input_tokens": 5, "output_tokens": 1}
    start = anthropic_event("message_start", message={"id": "m", "usage": usage})
    block = anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    delta = anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "par"})
    llm_server.script(sse(start, block, delta, ending="stall"))
    controller = AbortController()
    stream = stream_simple(
        anthropic_model(llm_server.base_url),
        trace_context(),
        StreamOptions(api_key="k", signal=controller.signal),
    )
    events = []
    async for event in stream:
        events.append(event)
        if event.type == "text_delta":
            controller.abort()
    final = await stream.result()
    assert compact(events) == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="par"',
        "error reason=aborted",
    ]
    assert final.content == [TextContent(text="par")] and final.usage.input == 5


def test_server_retry_delay_parsing() -> None:
    assert server_retry_delay_ms({"retry-after-ms": "150"}) == 150
    assert server_retry_delay_ms({"retry-after": "2"}) == 2000
    assert server_retry_delay_ms({"retry-after-ms": "nonsense", "retry-after": "1.5"}) == 1500
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert server_retry_delay_ms({"retry-after": date}, now=now) == pytest.approx(30_000, abs=1000)
    assert server_retry_delay_ms({"retry-after": "soon"}) is None
    assert server_retry_delay_ms({}) is None


def test_backoff_grows_and_is_capped() -> None:
    assert 375 <= backoff_delay_ms(0) <= 500
    assert 750 <= backoff_delay_ms(1) <= 1000
    assert 6000 <= backoff_delay_ms(10) <= 8000


# --- the consumer stops ---------------------------------------------------------------------------


async def _closed_by_client(server: LLMServer) -> None:
    async with asyncio.timeout(5):
        await server.disconnected.wait()
    assert server.disconnects == 1


async def test_a_loop_sink_raising_mid_stream_closes_the_response(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk("one "), ending="stall"))
    streams: list[AssistantMessageEventStream] = []

    def stream_fn(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        streams.append(stream_simple(model, context, options))
        return streams[-1]

    def sink(event: AgentEvent) -> None:
        if event.type == "message_update":
            raise RuntimeError("sink broke")

    config = AgentLoopConfig(
        model=openai_model(llm_server.base_url), options=AgentOptions(stream=StreamOptions(api_key="k"))
    )
    with pytest.raises(RuntimeError, match="sink broke"):
        await run_agent_loop([UserMessage(content="hi")], AgentContext(), config, sink, None, stream_fn)
    assert not streams[0].producing
    assert running_producers() == 0
    await _closed_by_client(llm_server)


async def test_a_consumer_raising_inside_async_with_closes_the_response(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk("one "), ending="stall"))
    stream = stream_simple(openai_model(llm_server.base_url), trace_context(), StreamOptions(api_key="k"))
    with pytest.raises(RuntimeError, match="consumer broke"):
        async with stream:
            async for event in stream:
                if event.type == "text_delta":
                    raise RuntimeError("consumer broke")
    assert not stream.producing
    await _closed_by_client(llm_server)
    final = await stream.result()
    assert (final.stop_reason, final.error_message) == ("aborted", "Request was aborted")


async def test_an_abandoned_iteration_closes_the_response(llm_server: LLMServer) -> None:
    start = anthropic_event("message_start", message={"id": "m", "usage": {"input_tokens": 5}})
    block = anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    delta = anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "par"})
    llm_server.script(sse(start, block, delta, ending="stall"))
    stream = stream_simple(anthropic_model(llm_server.base_url), trace_context(), StreamOptions(api_key="k"))
    async for event in stream:
        if event.type == "text_delta":
            break  # no aclose(): the event loop finalises the iterator
    await _closed_by_client(llm_server)
    final = await stream.result()  # also waits for the producer task to finish
    assert (final.stop_reason, final.error_message) == ("aborted", "Request was aborted")
    assert not stream.producing
