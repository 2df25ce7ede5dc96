"""The openai-responses provider against a loopback server that streams like the Responses API."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agent_core.abort import AbortController
from agent_core.llm import Context, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agent_core.providers import stream_simple
from agent_core.providers.openai_responses import build_request_body
from tests.agent_core.providers.helpers import (
    KEY,
    collect,
    compact,
    responses_model,
    run_scripted,
    trace_context,
    wire_data,
)
from tests.agent_core.providers.llm_server import LLMServer, sse, status


def event(kind: str, **data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def text_item(text: str, item_id: str = "msg_1") -> list[str]:
    done = {"id": item_id, "type": "message", "content": [{"type": "output_text", "text": text}]}
    return [
        event("response.output_item.added", item={"id": item_id, "type": "message", "content": []}),
        event("response.content_part.added", part={"type": "output_text", "text": ""}),
        event("response.output_text.delta", delta=text),
        event("response.output_item.done", item=done),
    ]


def completed(status_: str = "completed", reason: str | None = None, **usage: int) -> str:
    response: dict[str, Any] = {"id": "resp_1", "status": status_, "usage": usage or None}
    if reason:
        response["incomplete_details"] = {"reason": reason}
    kind = "response.completed" if status_ == "completed" else "response.incomplete"
    return event(kind, response=response)


async def run(
    server: LLMServer, *pieces: str, options: StreamOptions = KEY, **model: Any
) -> tuple[list[str], Any]:
    return await run_scripted(server, responses_model(server.base_url, **model), *pieces, options=options)


async def test_recorded_stream_with_reasoning_text_and_a_split_tool_call(llm_server: LLMServer) -> None:
    body = wire_data("responses_reasoning_text_tool.sse")
    # Sent in uneven pieces, as the network delivers them.
    pieces = [body[i : i + 97] for i in range(0, len(body), 97)]
    llm_server.script(sse(*pieces))
    model = responses_model(llm_server.base_url, reasoning=True)
    events, final = await collect(stream_simple(model, trace_context(), KEY))
    assert compact(events) == [
        "start",
        "thinking_start ci=0",
        'thinking_delta ci=0 delta="Plan: "',
        'thinking_delta ci=0 delta="echo it."',
        'thinking_delta ci=0 delta="\\n\\n"',
        'thinking_end ci=0 content="Plan: echo it."',
        "text_start ci=1",
        'text_delta ci=1 delta="Calling "',
        'text_delta ci=1 delta="echo."',
        'text_end ci=1 content="Calling echo."',
        "toolcall_start ci=2",
        'toolcall_delta ci=2 delta="{\\"val"',
        'toolcall_delta ci=2 delta="ue\\":\\"hel"',
        'toolcall_delta ci=2 delta="lo\\"}"',
        'toolcall_end ci=2 toolCall={"type":"toolCall","id":"call_Xy|fc_03","name":"echo",'
        '"arguments":{"value":"hello"}}',
        "done reason=toolUse",
    ]
    partial_args = [e.partial.content[2].arguments for e in events if e.type == "toolcall_delta"]  # type: ignore[union-attr]
    assert partial_args == [{}, {"value": "hel"}, {"value": "hello"}]
    thinking = final.content[0]
    assert isinstance(thinking, ThinkingContent)
    assert json.loads(thinking.thinking_signature or "")["encrypted_content"] == "gAAAAABo-enc"
    assert final.content[1] == TextContent(text="Calling echo.", text_signature='{"v":1,"id":"msg_02"}')
    assert (final.response_id, final.response_model) == ("resp_68a1", "gpt-test-2025-08-07")
    assert (final.usage.input, final.usage.cache_read, final.usage.output) == (100, 20, 40)
    request = llm_server.requests[0]
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.json["store"] is False and request.json["stream"] is True


async def test_reasoning_items_and_call_ids_are_carried_to_the_next_turn(llm_server: LLMServer) -> None:
    llm_server.script(sse(wire_data("responses_reasoning_text_tool.sse")))
    model = responses_model(llm_server.base_url, reasoning=True)
    first = await stream_simple(model, trace_context(), StreamOptions(api_key="k", reasoning="high")).result()
    assert llm_server.requests[0].json["reasoning"] == {"effort": "high", "summary": "auto"}
    assert llm_server.requests[0].json["include"] == ["reasoning.encrypted_content"]
    result = ToolResultMessage(
        tool_call_id="call_Xy|fc_03", tool_name="echo", content=[TextContent(text="hello")]
    )
    context = trace_context()
    context.messages.extend([first, result])
    llm_server.script(sse(*text_item("done"), completed()))
    final = await stream_simple(model, context, StreamOptions(api_key="k")).result()
    assert final.content == [TextContent(text="done", text_signature='{"v":1,"id":"msg_1"}')]
    sent = llm_server.requests[1].json["input"]
    assert sent[0] == {"role": "developer", "content": "sys"}
    assert sent[1] == {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    assert sent[2] == {
        "id": "rs_01",
        "type": "reasoning",
        "encrypted_content": "gAAAAABo-enc",
        "summary": [{"type": "summary_text", "text": "Plan: echo it."}],
    }
    assert sent[3]["type"] == "message" and sent[3]["id"] == "msg_02"
    assert sent[4] == {
        "type": "function_call",
        "call_id": "call_Xy",
        "id": "fc_03",
        "name": "echo",
        "arguments": '{"value":"hello"}',
    }
    assert sent[5] == {"type": "function_call_output", "call_id": "call_Xy", "output": "hello"}


async def test_max_output_tokens_is_length(llm_server: LLMServer) -> None:
    events, final = await run(
        llm_server,
        *text_item("cut"),
        completed("incomplete", "max_output_tokens", input_tokens=5, output_tokens=3),
    )
    assert events[-1] == "done reason=length"
    assert final.stop_reason == "length" and final.usage.output == 3


async def test_content_filter_is_an_error(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, *text_item("par"), completed("incomplete", "content_filter"))
    assert events[-1] == "error reason=error"
    assert final.error_message == "incomplete: content_filter"
    assert final.content[0].text == "par"


async def test_a_refusal_is_the_reply_text(llm_server: LLMServer) -> None:
    done = {"id": "msg_r", "type": "message", "content": [{"type": "refusal", "refusal": "I can't help."}]}
    events, final = await run(
        llm_server,
        event("response.output_item.added", item={"id": "msg_r", "type": "message", "content": []}),
        event("response.content_part.added", part={"type": "refusal", "refusal": ""}),
        event("response.refusal.delta", delta="I can't help."),
        event("response.output_item.done", item=done),
        completed(),
    )
    assert events[-2:] == ['text_end ci=0 content="I can\'t help."', "done reason=stop"]
    assert final.content[0].text == "I can't help."


async def test_failed_response_and_error_event(llm_server: LLMServer) -> None:
    failed = {
        "id": "r",
        "status": "failed",
        "error": {"code": "server_error", "message": "The model failed."},
    }
    _, final = await run(llm_server, event("response.failed", response=failed))
    assert final.error_message == "server_error: The model failed."
    _, final = await run(
        llm_server, *text_item("so")[:3], event("error", code="rate_limit_exceeded", message="Slow down.")
    )
    assert final.error_message == "Error Code rate_limit_exceeded: Slow down."
    assert final.content == [TextContent(text="so")]


async def test_stream_that_ends_before_the_response_completes_is_an_error(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, *text_item("half")[:3])
    assert events[-1] == "error reason=error"
    assert final.error_message == "OpenAI Responses stream ended before the response completed"
    assert final.content == [TextContent(text="half")]


async def test_http_400_carries_the_message(llm_server: LLMServer) -> None:
    body = {"error": {"message": "Unsupported parameter: 'temperature'.", "type": "invalid_request_error"}}
    llm_server.script(status(400, body))
    events, final = await collect(stream_simple(responses_model(llm_server.base_url), trace_context(), KEY))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "400 Unsupported parameter: 'temperature'."
    assert len(llm_server.requests) == 1


async def test_429_with_retry_after_is_waited_for(llm_server: LLMServer) -> None:
    llm_server.script(
        status(429, {"error": {"message": "Rate limit reached"}}, {"retry-after": "0.3"}),
        sse(*text_item("ok"), completed()),
    )
    started = time.monotonic()
    events, final = await collect(stream_simple(responses_model(llm_server.base_url), trace_context(), KEY))
    assert time.monotonic() - started >= 0.3
    assert events[-1].type == "done" and final.content[0].text == "ok"
    assert len(llm_server.requests) == 2


async def test_abort_mid_stream_keeps_the_partial_reply(llm_server: LLMServer) -> None:
    llm_server.script(sse(*text_item("one ")[:3], ending="stall"))
    controller = AbortController()
    options = StreamOptions(api_key="k", signal=controller.signal)
    stream = stream_simple(responses_model(llm_server.base_url), trace_context(), options)
    events = []
    async for item in stream:
        events.append(item)
        if item.type == "text_delta":
            controller.abort()
    final = await stream.result()
    assert compact(events)[-1] == "error reason=aborted"
    assert (final.stop_reason, final.error_message) == ("aborted", "Request was aborted")
    assert final.content == [TextContent(text="one ")]
    await asyncio.wait_for(llm_server.disconnected.wait(), 2)


def test_request_for_another_models_history_drops_paired_ids() -> None:
    model = responses_model("https://api.openai.com/v1", reasoning=True)
    other = AssistantMessage(
        content=[
            ThinkingContent(thinking="private"),
            ToolCall(id="call_1|fc_9", name="echo", arguments={"value": "x"}),
        ],
        api="openai-responses",
        provider="openai",
        model="gpt-other",
        stop_reason="toolUse",
    )
    context = Context(
        messages=[
            UserMessage(content="hi"),
            other,
            ToolResultMessage(tool_call_id="call_1|fc_9", tool_name="echo", content=[TextContent(text="x")]),
        ]
    )
    body = build_request_body(model, context, StreamOptions(max_tokens=50, session_id="s-1"))
    assert body["max_output_tokens"] == 50 and body["prompt_cache_key"] == "s-1"
    call = next(item for item in body["input"] if item.get("type") == "function_call")
    assert "id" not in call and call["call_id"] == "call_1"
