"""Provider HTTP attempts reach the metrics through `agent_core.providers`' request observers:
a real provider stream against a scripted LLM server on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_core.llm import StreamOptions
from agent_core.providers import stream_simple
from agent_core.providers._common import observe_requests
from gateway.telemetry.metrics import Metrics
from tests.agent_core.providers.helpers import collect, openai_model, trace_context
from tests.agent_core.providers.llm_server import LLMServer, sse, status

OK = sse(
    'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n',
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    "data: [DONE]\n\n",
)


@pytest.fixture
async def server() -> AsyncIterator[LLMServer]:
    running = LLMServer()
    await running.start()
    try:
        yield running
    finally:
        await running.aclose()


@pytest.fixture
def metrics() -> AsyncIterator[Metrics]:
    counted = Metrics()
    remove = observe_requests(counted.provider_request)
    yield counted
    remove()


async def run(server: LLMServer, **options: object) -> str | None:
    opts = StreamOptions(api_key="k", **options)  # type: ignore[arg-type]
    _, final = await collect(stream_simple(openai_model(server.base_url), trace_context(), opts))
    return final.stop_reason  # type: ignore[attr-defined,no-any-return]


async def test_a_retried_request_counts_each_attempt(server: LLMServer, metrics: Metrics) -> None:
    server.script(status(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "10"}), OK)
    assert await run(server) == "stop"
    assert metrics.provider_requests.values == {
        ("openai", "gpt-test", "429"): 1,
        ("openai", "gpt-test", "200"): 1,
    }
    assert metrics.provider_retries.values == {("openai", "gpt-test", "429"): 1}
    assert metrics.provider_errors.values == {}


async def test_a_request_that_fails_for_good_is_an_error(server: LLMServer, metrics: Metrics) -> None:
    fail = status(503, {"error": {"message": "busy"}}, {"retry-after-ms": "1"})
    server.script(fail, fail)
    assert await run(server, max_retries=1) == "error"
    assert metrics.provider_requests.values == {("openai", "gpt-test", "503"): 2}
    assert metrics.provider_retries.values == {("openai", "gpt-test", "503"): 1}
    assert metrics.provider_errors.values == {("openai", "gpt-test", "503"): 1}


async def test_a_refused_request_is_not_retried(server: LLMServer, metrics: Metrics) -> None:
    server.script(status(401, {"error": {"message": "bad key"}}))
    assert await run(server) == "error"
    assert metrics.provider_errors.values == {("openai", "gpt-test", "401"): 1}
    assert metrics.provider_retries.values == {}
