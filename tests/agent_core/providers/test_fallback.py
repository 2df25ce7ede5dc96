"""Key rotation and the fallback chain against loopback servers that fail like real APIs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from agent_core.llm import Context, StreamOptions
from agent_core.messages import TextContent, UserMessage
from agent_core.providers import stream_simple
from agent_core.providers.fallback import (
    FallbackStep,
    KeyRest,
    ModelHealth,
    Resilience,
    classify_failure,
    stream_resilient,
)
from agent_core.providers.key_pool import KeyPool
from tests.agent_core.providers.helpers import collect, compact, openai_model, trace_context
from tests.agent_core.providers.llm_server import LLMServer, sse, status

NO_RETRY = StreamOptions(max_retries=0)


def chunk(text: str) -> str:
    return "data: " + json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"


def answer(text: str) -> object:
    return sse(
        chunk(text),
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        "data: [DONE]\n\n",
    )


@pytest.fixture
async def backup() -> AsyncIterator[LLMServer]:
    server = LLMServer()
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("429 Rate limit reached for requests", "rate_limit"),
        ("Server requested 90s retry delay (max: 60s): 429 slow down", "rate_limit"),
        ("529 Overloaded", "overloaded"),
        ("503 The model is overloaded.", "overloaded"),
        ("Connection error: All connection attempts failed", "overloaded"),
        ("Request timed out", "overloaded"),
        ("401 Incorrect API key provided", "auth"),
        ("403 Permission denied: consumer has been suspended", "auth"),
        ("400 This model's maximum context length is 128000 tokens.", "context_length"),
        ("400 prompt is too long: 210000 tokens > 200000 maximum", "context_length"),
        ("400 Unsupported parameter: 'temperature'.", None),
        ("Request was aborted", None),
    ],
)
def test_failures_are_classified_from_the_provider_message(message: str, kind: str | None) -> None:
    assert classify_failure(message) == kind


async def test_an_overloaded_primary_falls_back_and_then_rests(
    llm_server: LLMServer, backup: LLMServer
) -> None:
    primary = openai_model(llm_server.base_url, id="primary")
    secondary = openai_model(backup.base_url, id="secondary", provider="backup")
    steps: list[FallbackStep] = []
    clock = Clock()
    policy = Resilience(health=ModelHealth(cooldown_s=30, clock=clock), on_step=steps.append)
    llm_server.script(status(529, {"type": "error", "error": {"message": "Overloaded"}}))
    backup.script(answer("from backup"))
    events, final = await collect(
        stream_resilient(stream_simple, [primary, secondary], trace_context(), NO_RETRY, policy)
    )
    # The consumer sees one clean reply: nothing of the failed attempt.
    assert compact(events) == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="from backup"',
        'text_end ci=0 content="from backup"',
        "done reason=stop",
    ]
    assert (final.provider, final.model) == ("backup", "secondary")
    assert final.diagnostics["fallback"] == {
        "from": "openai/primary",
        "to": "backup/secondary",
        "reason": "overloaded",
        "error": "529 Overloaded",
    }
    assert [(s.from_ref, s.to_ref) for s in steps] == [("openai/primary", "backup/secondary")]

    # While it rests the primary is not asked at all; afterwards it is again.
    backup.script(answer("again"))
    final = await stream_resilient(
        stream_simple, [primary, secondary], trace_context(), NO_RETRY, policy
    ).result()
    assert final.model == "secondary"
    assert final.diagnostics["fallback"] == {
        "from": "openai/primary",
        "to": "backup/secondary",
        "reason": "overloaded",
        "error": "resting after: 529 Overloaded",
    }
    assert len(llm_server.requests) == 1 and len(steps) == 2
    clock.now += 31
    llm_server.script(answer("primary is back"))
    final = await stream_resilient(
        stream_simple, [primary, secondary], trace_context(), NO_RETRY, policy
    ).result()
    assert final.model == "primary" and final.diagnostics is None


async def test_a_stopped_primary_server_falls_back(backup: LLMServer) -> None:
    gone = LLMServer()
    await gone.start()
    url = gone.base_url
    await gone.aclose()
    backup.script(answer("still here"))
    route = [openai_model(url, id="primary"), openai_model(backup.base_url, id="local", provider="ollama")]
    final = await stream_resilient(stream_simple, route, trace_context(), NO_RETRY).result()
    assert final.content == [TextContent(text="still here")]
    assert final.diagnostics["fallback"]["reason"] == "overloaded"


async def test_context_length_moves_only_to_a_larger_window(llm_server: LLMServer, backup: LLMServer) -> None:
    small = openai_model(llm_server.base_url, id="small", context_window=8_000)
    same = openai_model(llm_server.base_url, id="same", context_window=8_000)
    large = openai_model(backup.base_url, id="large", context_window=200_000)
    too_long = {
        "error": {
            "message": "This model's maximum context length is 8000 tokens.",
            "code": "context_length_exceeded",
        }
    }
    llm_server.script(status(400, too_long))
    backup.script(answer("fits"))
    final = await stream_resilient(stream_simple, [small, same, large], trace_context(), NO_RETRY).result()
    assert final.model == "large" and final.diagnostics["fallback"]["reason"] == "context_length"
    assert len(llm_server.requests) == 1  # "same" was skipped: its window is no larger


async def test_errors_that_say_nothing_about_the_provider_do_not_fall_back(
    llm_server: LLMServer, backup: LLMServer
) -> None:
    llm_server.script(status(400, {"error": {"message": "Invalid 'tools[0].name'"}}))
    route = [openai_model(llm_server.base_url), openai_model(backup.base_url, id="b")]
    events, final = await collect(stream_resilient(stream_simple, route, trace_context(), NO_RETRY))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "400 Invalid 'tools[0].name'" and backup.requests == []


async def test_a_failure_after_content_streamed_is_not_retried(
    llm_server: LLMServer, backup: LLMServer
) -> None:
    llm_server.script(sse(chunk("half"), ending="reset"))
    route = [openai_model(llm_server.base_url), openai_model(backup.base_url, id="b")]
    events, final = await collect(stream_resilient(stream_simple, route, trace_context(), NO_RETRY))
    assert compact(events)[-1] == "error reason=error"
    assert final.content == [TextContent(text="half")] and backup.requests == []


async def test_a_rejected_key_rests_and_the_next_key_answers(llm_server: LLMServer) -> None:
    rests: list[KeyRest] = []
    clock = Clock()
    pool = KeyPool("openai", ["sk-bad-0001", "sk-good-0002"], clock=clock)
    policy = Resilience(pools={"openai": pool}, on_key_rest=rests.append)
    model = openai_model(llm_server.base_url)
    llm_server.script(status(401, {"error": {"message": "Incorrect API key provided"}}), answer("ok"))
    final = await stream_resilient(stream_simple, [model], trace_context(), NO_RETRY, policy).result()
    assert final.content == [TextContent(text="ok")]
    assert [r.headers["authorization"] for r in llm_server.requests] == [
        "Bearer sk-bad-0001",
        "Bearer sk-good-0002",
    ]
    assert rests == [KeyRest("openai", "…0001", "auth", 600.0)]

    # The bad key rests: the next call goes straight to the good one.
    llm_server.script(answer("ok again"))
    await stream_resilient(stream_simple, [model], trace_context(), NO_RETRY, policy).result()
    assert llm_server.requests[-1].headers["authorization"] == "Bearer sk-good-0002"
    assert len(llm_server.requests) == 3


async def test_rate_limited_keys_rotate_and_all_resting_falls_back(
    llm_server: LLMServer, backup: LLMServer
) -> None:
    clock = Clock()
    pool = KeyPool("openai", ["k-a", "k-b"], clock=clock, rate_limit_cooldown_s=20)
    policy = Resilience(pools={"openai": pool})
    limited = status(429, {"error": {"message": "Rate limit reached"}})
    llm_server.script(limited, limited)
    backup.script(answer("backup"))
    route = [openai_model(llm_server.base_url), openai_model(backup.base_url, id="b", provider="backup")]
    final = await stream_resilient(stream_simple, route, trace_context(), NO_RETRY, policy).result()
    assert final.model == "b" and final.diagnostics["fallback"]["reason"] == "rate_limit"
    assert [r.headers["authorization"] for r in llm_server.requests] == ["Bearer k-a", "Bearer k-b"]
    assert pool.resting() == 2
    clock.now += 21
    assert pool.resting() == 0


def test_key_pool_rotation_and_soonest_when_all_rest() -> None:
    clock = Clock()
    pool = KeyPool("p", ["a", "b", "c", "a", ""], clock=clock)
    assert len(pool) == 3 and pool.candidates() == ["a", "b", "c"]
    pool.used("a")
    assert pool.candidates() == ["b", "c", "a"]
    pool.rest("b", auth=False, seconds=5)
    pool.rest("c", auth=False, seconds=3)
    pool.rest("a", auth=True)
    assert pool.candidates() == ["c"]  # all resting: the one ready soonest
    clock.now += 4
    assert pool.candidates() == ["c"]
    clock.now += 2
    assert pool.candidates() == ["b", "c"]


async def test_aborted_calls_never_fall_back(backup: LLMServer) -> None:
    from agent_core.abort import AbortController

    controller = AbortController()
    controller.abort()
    route = [openai_model("http://127.0.0.1:9/"), openai_model(backup.base_url, id="b")]
    options = StreamOptions(max_retries=0, signal=controller.signal)
    _, final = await collect(
        stream_resilient(stream_simple, route, Context(messages=[UserMessage(content="x")]), options)
    )
    assert final.stop_reason == "aborted" and backup.requests == []


async def test_closing_the_stream_stops_the_attempt_in_flight(
    llm_server: LLMServer, backup: LLMServer
) -> None:
    llm_server.script(sse(chunk("par"), ending="stall"))
    route = [openai_model(llm_server.base_url), openai_model(backup.base_url, id="b")]
    stream = stream_resilient(stream_simple, route, trace_context(), NO_RETRY)
    async for event in stream:
        if event.type == "text_delta":
            break
    await stream.aclose()
    final = await stream.result()
    assert final.stop_reason == "aborted"
    await asyncio.wait_for(llm_server.disconnected.wait(), 2)  # the HTTP response was closed
    assert backup.requests == []
