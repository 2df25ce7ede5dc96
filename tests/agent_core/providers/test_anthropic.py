"""The anthropic-messages provider against a scripted loopback server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent_core.llm import Context, StreamOptions
from agent_core.messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agent_core.providers import AnthropicOptions, stream_anthropic, stream_simple
from agent_core.providers.anthropic import build_request_body, convert_messages
from tests.agent_core.providers.helpers import (
    KEY,
    anthropic_model,
    collect,
    compact,
    run_scripted,
    trace_context,
)
from tests.agent_core.providers.llm_server import LLMServer, sse, status


def ev(kind: str, sep: str = "\n", **data: Any) -> str:
    return f"event: {kind}{sep}data: {json.dumps({'type': kind, **data})}{sep}{sep}"


def message_start(input_tokens: int = 10, output_tokens: int = 1) -> str:
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return ev("message_start", message={"id": "msg_1", "usage": usage})


def text_block(index: int, *texts: str) -> list[str]:
    return [
        ev("content_block_start", index=index, content_block={"type": "text", "text": ""}),
        *[ev("content_block_delta", index=index, delta={"type": "text_delta", "text": t}) for t in texts],
        ev("content_block_stop", index=index),
    ]


def message_end(reason: str, output_tokens: int = 5) -> list[str]:
    return [
        ev("message_delta", delta={"stop_reason": reason}, usage={"output_tokens": output_tokens}),
        ev("message_stop"),
    ]


async def run(
    server: LLMServer, *pieces: str, options: StreamOptions = KEY, **model: Any
) -> tuple[list[str], Any]:
    return await run_scripted(server, anthropic_model(server.base_url, **model), *pieces, options=options)


async def test_sse_error_event_carries_the_raw_data(llm_server: LLMServer) -> None:
    error = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    events, final = await run(
        llm_server,
        message_start(),
        *text_block(0, "part")[:2],
        f"event: error\ndata: {error}\n\n",
    )
    assert events == ["start", "text_start ci=0", 'text_delta ci=0 delta="part"', "error reason=error"]
    assert final.error_message == error
    assert (final.usage.input, final.usage.output, final.usage.cost.total) == (10, 1, 4.5e-05)


async def test_stream_ending_before_message_stop_is_an_error(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, message_start(), *text_block(0, "x"))
    assert events == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="x"',
        'text_end ci=0 content="x"',
        "error reason=error",
    ]
    assert final.error_message == "Anthropic stream ended before message_stop"


async def test_refusal_is_an_error(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, message_start(), *message_end("refusal", output_tokens=1))
    assert events == ["start", "error reason=error"]
    assert final.error_message == "An unknown error occurred"
    assert final.usage.cost.total == 4.5e-05


async def test_unknown_stop_reason_is_an_error(llm_server: LLMServer) -> None:
    _, final = await run(llm_server, message_start(), *message_end("galaxy_brain"))
    assert final.error_message == "Unhandled stop reason: galaxy_brain"


async def test_line_endings_comments_and_multiline_data(llm_server: LLMServer) -> None:
    split_json = (
        'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,\r\n'
        'data: "delta":{"type":"text_delta","text":"b"}}\r\n\r\n'
    )
    events, final = await run(
        llm_server,
        ": keep-alive comment\n\n",
        message_start().replace("\n", "\r"),
        ev("content_block_start", "\r\n", index=0, content_block={"type": "text", "text": ""}),
        ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "a"}),
        split_json,
        'event: ping\ndata: {"type": "ping"}\n\n',
        ev("content_block_stop", "\r\n", index=0),
        *message_end("end_turn"),
    )
    assert final.content == [TextContent(text="ab")]
    assert events[-1] == "done reason=stop"


async def test_a_line_break_split_between_reads(llm_server: LLMServer) -> None:
    body = "".join([message_start(), *text_block(0, "hello"), *message_end("end_turn")]).replace("\n", "\r\n")
    # Cut every "\r\n" in two so the pair spans two network reads.
    pieces = body.split("\n")
    llm_server.script(
        sse(*[p + "\n" if i < len(pieces) - 1 else p for i, p in enumerate(pieces)], delay=0.001)
    )
    final = await stream_simple(anthropic_model(llm_server.base_url), trace_context(), KEY).result()
    assert final.content == [TextContent(text="hello")] and final.stop_reason == "stop"


async def test_redacted_thinking_and_signature(llm_server: LLMServer) -> None:
    _, final = await run(
        llm_server,
        message_start(),
        ev("content_block_start", index=0, content_block={"type": "redacted_thinking", "data": "opaque"}),
        ev("content_block_stop", index=0),
        ev(
            "content_block_start",
            index=1,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        ),
        ev("content_block_delta", index=1, delta={"type": "thinking_delta", "thinking": "why"}),
        ev("content_block_delta", index=1, delta={"type": "signature_delta", "signature": "s1"}),
        ev("content_block_delta", index=1, delta={"type": "signature_delta", "signature": "s2"}),
        ev("content_block_stop", index=1),
        *message_end("end_turn"),
    )
    assert final.content == [
        ThinkingContent(thinking="[Reasoning redacted]", thinking_signature="opaque", redacted=True),
        ThinkingContent(thinking="why", thinking_signature="s1s2"),
    ]


async def test_tool_input_streams_in_pieces_and_max_tokens_is_length(llm_server: LLMServer) -> None:
    pieces = ['{"val', 'ue": "a', 'b"}']
    llm_server.script(
        sse(
            message_start(),
            ev(
                "content_block_start",
                index=0,
                content_block={"type": "tool_use", "id": "toolu_9", "name": "echo", "input": {}},
            ),
            *[
                ev("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": p})
                for p in pieces
            ],
            ev("content_block_stop", index=0),
            *message_end("max_tokens"),
            delay=0.001,
        )
    )
    events, final = await collect(stream_simple(anthropic_model(llm_server.base_url), trace_context(), KEY))
    assert [e.partial.content[0].arguments for e in events if e.type == "toolcall_delta"] == [
        {},
        {"value": "a"},
        {"value": "ab"},
    ]  # type: ignore[union-attr]
    assert final.stop_reason == "length"
    assert final.content == [ToolCall(id="toolu_9", name="echo", arguments={"value": "ab"})]


async def test_http_error_is_reported_like_the_sdk(llm_server: LLMServer) -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens too large"}}
    llm_server.script(status(400, body))
    events, final = await collect(stream_simple(anthropic_model(llm_server.base_url), trace_context(), KEY))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "400 " + json.dumps(body, separators=(",", ":"))


async def test_budget_thinking_request_follows_the_output_cap(llm_server: LLMServer) -> None:
    llm_server.script(sse(message_start(1, 1), *message_end("end_turn", output_tokens=1)))
    options = StreamOptions(api_key="k", reasoning="medium", temperature=0.5)
    events, final = await collect(
        stream_simple(anthropic_model(llm_server.base_url), trace_context(), options)
    )
    body = llm_server.requests[0].json
    assert (body["max_tokens"], body["thinking"]) == (8192, {"type": "enabled", "budget_tokens": 7168})
    assert "temperature" not in body
    assert llm_server.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert compact(events) == ["start", "done reason=stop"]
    assert final.usage.cost.total == 1.8e-05


def test_adaptive_thinking_models_take_an_effort() -> None:
    model = anthropic_model("http://h", id="claude-opus-4-6")
    body = build_request_body(model, trace_context(), AnthropicOptions(thinking_enabled=True, effort="low"))
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "low"}


async def test_simple_options_without_reasoning_disable_thinking_only_for_reasoning_models(
    llm_server: LLMServer,
) -> None:
    llm_server.script(
        sse(message_start(), *message_end("end_turn")), sse(message_start(), *message_end("end_turn"))
    )
    await stream_simple(
        anthropic_model(llm_server.base_url, reasoning=False),
        trace_context(),
        StreamOptions(api_key="k", temperature=0.3),
    ).result()
    plain = llm_server.requests[0].json
    assert "thinking" not in plain and plain["temperature"] == 0.3
    await stream_anthropic(anthropic_model(llm_server.base_url), trace_context(), KEY).result()
    raw = llm_server.requests[1].json
    assert raw["max_tokens"] == 8192 // 3 and "thinking" not in raw


def test_cache_retention() -> None:
    model = anthropic_model("http://h")
    long = build_request_body(model, trace_context(), StreamOptions(cache_retention="long"))
    assert long["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    none = build_request_body(
        model, trace_context(), StreamOptions(cache_retention="none", metadata={"user_id": "u"})
    )
    assert "cache_control" not in none["system"][0] and "cache_control" not in none["tools"][0]
    assert none["messages"] == [{"role": "user", "content": "hi"}]
    assert none["metadata"] == {"user_id": "u"}


def test_message_conversion() -> None:
    model = anthropic_model("http://h")
    same = {"api": model.api, "provider": model.provider, "model": model.id}
    image = ImageContent(data="QUJD", mime_type="image/png")
    messages = [
        UserMessage(content=[TextContent(text="look"), TextContent(text="  "), image]),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="signed", thinking_signature="sig"),
                ThinkingContent(thinking="unsigned"),
                ThinkingContent(thinking="[Reasoning redacted]", thinking_signature="opaque", redacted=True),
                TextContent(text="calling"),
                ToolCall(id="call|with|pipes", name="echo", arguments={"value": "a"}),
                ToolCall(id="t2", name="echo", arguments={}),
            ],
            stop_reason="toolUse",
            **same,
        ),
        ToolResultMessage(tool_call_id="call|with|pipes", tool_name="echo", content=[TextContent(text="A")]),
        ToolResultMessage(tool_call_id="t2", tool_name="echo", content=[image], is_error=True),
    ]
    converted = convert_messages(messages, model, {"type": "ephemeral"})
    assert converted == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig"},
                {"type": "text", "text": "unsigned"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "call|with|pipes", "name": "echo", "input": {"value": "a"}},
                {"type": "tool_use", "id": "t2", "name": "echo", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call|with|pipes", "content": "A", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [
                        {"type": "text", "text": "(see attached image)"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
                        },
                    ],
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
    ]


def test_tool_ids_from_another_model_are_normalised() -> None:
    model = anthropic_model("http://h")
    messages = [
        AssistantMessage(
            content=[
                ThinkingContent(thinking="mine", thinking_signature="x"),
                ToolCall(id="fc|1/2", name="echo", arguments={}),
            ],
            api="openai-responses",
            provider="openai",
            model="gpt-5",
            stop_reason="toolUse",
        ),
        ToolResultMessage(tool_call_id="fc|1/2", tool_name="echo", content=[TextContent(text="r")]),
    ]
    converted = convert_messages(messages, model, None)
    assert converted[0]["content"] == [
        {"type": "text", "text": "mine"},
        {"type": "tool_use", "id": "fc_1_2", "name": "echo", "input": {}},
    ]
    assert converted[1]["content"][0]["tool_use_id"] == "fc_1_2"


async def test_missing_key_for_the_real_api_is_an_error_event() -> None:
    model = anthropic_model("https://api.anthropic.com")
    final = await stream_simple(model, Context(messages=[UserMessage(content="x")]), StreamOptions()).result()
    assert final.error_message == "No API key for provider: anthropic"


async def test_a_server_that_keeps_the_stream_open_after_message_stop(llm_server: LLMServer) -> None:
    llm_server.script(sse(message_start(), *text_block(0, "done"), *message_end("end_turn"), ending="stall"))
    stream = stream_simple(anthropic_model(llm_server.base_url), trace_context(), KEY)
    final = await asyncio.wait_for(stream.result(), 2)
    assert final.content == [TextContent(text="done")] and final.stop_reason == "stop"
