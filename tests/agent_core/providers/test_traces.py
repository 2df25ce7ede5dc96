"""Every recorded pi-ai provider trace, replayed against our providers on a loopback server.

Each trace holds the SSE body (or HTTP error) the real pi-ai 0.73.1 providers were given and what
they produced: events (with the partial content each consumer saw), the final message with usage
and cost, the number of HTTP requests and the first request body.
"""

from __future__ import annotations

import pytest

from agent_core.llm import StreamOptions
from agent_core.providers import stream_simple
from tests.agent_core.providers.helpers import (
    anthropic_model,
    collect,
    compact,
    event_view,
    load_trace,
    openai_model,
    trace_context,
    trace_event_view,
    without_timestamp,
)
from tests.agent_core.providers.llm_server import LLMServer, Reply, sse, status

TRACES = [
    "an_01_thinking_text_tool",
    "an_02_text_end_turn",
    "an_03_max_tokens",
    "oa_01_text",
    "oa_02_reasoning_text_two_tools",
    "oa_04_length",
    "oa_06_http_400",
]


def _replies(trace: dict[str, object]) -> list[Reply]:
    replies: list[Reply] = []
    for item in trace["sse"]:  # type: ignore[attr-defined]
        if isinstance(item, dict):
            replies.append(status(item["status"], item["body"]))
        else:
            # Send event by event with a pause, as a server streams.
            pieces = [piece + "\n\n" for piece in item.split("\n\n") if piece]
            replies.append(sse(*pieces, delay=0.001))
    return replies


async def _replay(name: str, llm_server: LLMServer) -> tuple[dict[str, object], list[object], object]:
    trace = load_trace(name)
    llm_server.script(*_replies(trace))
    if trace["api"] == "openai-completions":
        model = openai_model(llm_server.base_url)
    else:
        model = anthropic_model(llm_server.base_url)
    events, final = await collect(stream_simple(model, trace_context(), StreamOptions(api_key="test-key")))
    return trace, events, final


@pytest.mark.parametrize("name", TRACES)
async def test_trace_events_final_message_and_request(name: str, llm_server: LLMServer) -> None:
    trace, events, final = await _replay(name, llm_server)
    assert compact(events) == trace["compact"]  # type: ignore[arg-type]
    assert without_timestamp(final.dump()) == trace["final"]  # type: ignore[attr-defined]
    assert len(llm_server.requests) == trace["requestCount"]
    assert llm_server.requests[0].json == trace["firstRequestBody"]


@pytest.mark.parametrize("name", TRACES)
async def test_trace_partial_content_of_every_event(name: str, llm_server: LLMServer) -> None:
    trace, events, _ = await _replay(name, llm_server)
    expected = [trace_event_view(e) for e in trace["events"]]  # type: ignore[attr-defined]
    assert [event_view(e) for e in events] == expected  # type: ignore[arg-type]


async def test_request_headers_carry_the_key_and_api_version(llm_server: LLMServer) -> None:
    for name in ("oa_01_text", "an_02_text_end_turn"):
        await _replay(name, llm_server)
    openai_request, anthropic_request = llm_server.requests
    assert openai_request.path == "/v1/chat/completions"
    assert openai_request.headers["authorization"] == "Bearer test-key"
    assert anthropic_request.path == "/v1/messages"
    assert anthropic_request.headers["x-api-key"] == "test-key"
    assert anthropic_request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in anthropic_request.headers
