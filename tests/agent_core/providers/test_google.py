"""The google-generative-ai provider against a loopback server that streams like Gemini."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agent_core.abort import AbortController
from agent_core.llm import StreamOptions
from agent_core.messages import TextContent, ThinkingContent, ToolCall, ToolResultMessage
from agent_core.providers import stream_simple
from tests.agent_core.providers.helpers import (
    KEY,
    collect,
    compact,
    google_model,
    run_scripted,
    trace_context,
    wire_data,
)
from tests.agent_core.providers.llm_server import LLMServer, sse, status


def chunk(*parts: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-test", "responseId": "r1"}
    if usage:
        body["usageMetadata"] = usage
    return f"data: {json.dumps(body)}\r\n\r\n"


async def run(
    server: LLMServer, *pieces: str, options: StreamOptions = KEY, **model: Any
) -> tuple[list[str], Any]:
    return await run_scripted(server, google_model(server.base_url, **model), *pieces, options=options)


async def test_recorded_stream_with_thought_text_and_a_function_call(llm_server: LLMServer) -> None:
    body = wire_data("gemini_thought_text_call.sse")
    llm_server.script(sse(*[body[i : i + 61] for i in range(0, len(body), 61)]))
    events, final = await collect(stream_simple(google_model(llm_server.base_url), trace_context(), KEY))
    call = final.content[2]
    assert isinstance(call, ToolCall) and call.id.startswith("echo_")
    assert compact(events) == [
        "start",
        "thinking_start ci=0",
        'thinking_delta ci=0 delta="Plan: echo it."',
        'thinking_end ci=0 content="Plan: echo it."',
        "text_start ci=1",
        'text_delta ci=1 delta="Calling "',
        'text_delta ci=1 delta="echo."',
        'text_end ci=1 content="Calling echo."',
        "toolcall_start ci=2",
        'toolcall_delta ci=2 delta="{\\"value\\":\\"hello\\"}"',
        "toolcall_end ci=2 toolCall="
        + json.dumps(
            {
                "type": "toolCall",
                "id": call.id,
                "name": "echo",
                "arguments": {"value": "hello"},
                "thoughtSignature": "CiQB-sig",
            },
            separators=(",", ":"),
        ),
        "done reason=toolUse",
    ]
    assert final.content[:2] == [
        ThinkingContent(thinking="Plan: echo it."),
        TextContent(text="Calling echo."),
    ]
    # 30 prompt tokens of which 10 cached; 12 candidate + 8 thought tokens of output.
    assert (final.usage.input, final.usage.cache_read, final.usage.output) == (20, 10, 20)
    assert (final.response_id, final.response_model) == ("m7a1aP-XJ", "gemini-test-001")
    request = llm_server.requests[0]
    assert request.path == "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    assert request.headers["x-goog-api-key"] == "test-key"
    assert request.json["systemInstruction"] == {"parts": [{"text": "sys"}]}
    assert request.json["tools"][0]["functionDeclarations"][0]["name"] == "echo"


async def test_signatures_and_results_go_back_on_the_next_turn(llm_server: LLMServer) -> None:
    llm_server.script(sse(wire_data("gemini_thought_text_call.sse")))
    model = google_model(llm_server.base_url)
    first = await stream_simple(model, trace_context(), StreamOptions(api_key="k", reasoning="low")).result()
    assert llm_server.requests[0].json["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingBudget": 2048,
    }
    call = first.content[2]
    assert isinstance(call, ToolCall)
    result = ToolResultMessage(tool_call_id=call.id, tool_name="echo", content=[TextContent(text="hello")])
    context = trace_context()
    context.messages.extend([first, result])
    llm_server.script(sse(chunk({"text": "done"}, finish="STOP")))
    final = await stream_simple(model, context, StreamOptions(api_key="k")).result()
    assert final.content == [TextContent(text="done")] and final.stop_reason == "stop"
    contents = llm_server.requests[1].json["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            {"thought": True, "text": "Plan: echo it."},
            {"text": "Calling echo."},
            {
                "functionCall": {"id": call.id, "name": "echo", "args": {"value": "hello"}},
                "thoughtSignature": "CiQB-sig",
            },
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "id": call.id,
                    "name": "echo",
                    "response": {"result": "hello", "isError": False},
                }
            }
        ],
    }


async def test_two_calls_without_ids_get_distinct_ids(llm_server: LLMServer) -> None:
    _, final = await run(
        llm_server,
        chunk({"functionCall": {"name": "echo", "args": {"value": "a"}}}),
        chunk({"functionCall": {"name": "echo", "args": {"value": "b"}}}, finish="STOP"),
    )
    ids = [block.id for block in final.content if isinstance(block, ToolCall)]
    assert len(set(ids)) == 2 and final.stop_reason == "toolUse"


async def test_max_tokens_is_length(llm_server: LLMServer) -> None:
    events, final = await run(
        llm_server,
        chunk({"text": "cut"}),
        chunk(
            {"text": " off"}, finish="MAX_TOKENS", usage={"promptTokenCount": 4, "candidatesTokenCount": 2}
        ),
    )
    assert events[-2:] == ['text_end ci=0 content="cut off"', "done reason=length"]
    assert final.usage.output == 2


async def test_safety_stop_is_an_error_after_closing_the_text(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, chunk({"text": "par"}), chunk(finish="SAFETY"))
    assert events == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="par"',
        'text_end ci=0 content="par"',
        "error reason=error",
    ]
    assert final.error_message == "Provider finishReason: SAFETY"


async def test_error_object_mid_stream(llm_server: LLMServer) -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    _, final = await run(llm_server, chunk({"text": "so"}), f"data: {json.dumps(error)}\r\n\r\n")
    assert final.error_message == "The model is overloaded."
    assert final.content == [TextContent(text="so")]


async def test_stream_without_a_finish_reason_is_an_error(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, chunk({"text": "half"}))
    assert events[-2:] == ['text_end ci=0 content="half"', "error reason=error"]
    assert final.error_message == "Gemini stream ended without a finishReason"


async def test_http_400_carries_the_message(llm_server: LLMServer) -> None:
    body = {"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}}
    llm_server.script(status(400, body))
    events, final = await collect(stream_simple(google_model(llm_server.base_url), trace_context(), KEY))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "400 API key not valid."


async def test_429_with_retry_after_is_waited_for(llm_server: LLMServer) -> None:
    body = {"error": {"code": 429, "message": "Resource exhausted.", "status": "RESOURCE_EXHAUSTED"}}
    llm_server.script(status(429, body, {"retry-after": "0.3"}), sse(chunk({"text": "ok"}, finish="STOP")))
    started = time.monotonic()
    _, final = await collect(stream_simple(google_model(llm_server.base_url), trace_context(), KEY))
    assert time.monotonic() - started >= 0.3
    assert final.content == [TextContent(text="ok")] and len(llm_server.requests) == 2


async def test_abort_mid_stream_keeps_the_partial_reply(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk({"text": "one "}), ending="stall"))
    controller = AbortController()
    options = StreamOptions(api_key="k", signal=controller.signal)
    stream = stream_simple(google_model(llm_server.base_url), trace_context(), options)
    events = []
    async for item in stream:
        events.append(item)
        if item.type == "text_delta":
            controller.abort()
    final = await stream.result()
    assert compact(events)[-2:] == ['text_end ci=0 content="one "', "error reason=aborted"]
    assert final.content == [TextContent(text="one ")] and final.stop_reason == "aborted"
    await asyncio.wait_for(llm_server.disconnected.wait(), 2)


async def test_missing_key_for_the_real_api_is_an_error_event() -> None:
    model = google_model("https://generativelanguage.googleapis.com")
    _, final = await collect(stream_simple(model, trace_context(), StreamOptions()))
    assert final.error_message == "No API key for provider: google"
