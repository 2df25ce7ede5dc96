"""The openai-completions provider against a scripted loopback server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.event_stream import AssistantMessageEventStream
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
from agent_core.providers import OpenAICompletionsOptions, stream_openai_completions, stream_simple
from agent_core.providers._common import new_output
from agent_core.providers.openai_completions import (
    ChunkAssembler,
    build_request_body,
    convert_messages,
    detect_compat,
    parse_usage,
)
from tests.agent_core.providers.helpers import (
    KEY,
    collect,
    compact,
    openai_model,
    run_scripted,
    trace_context,
)
from tests.agent_core.providers.llm_server import LLMServer, sse, status


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    body: dict[str, Any] = {"id": "chatcmpl-9", "model": "gpt-test", **extra}
    if delta is not None or finish is not None:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return f"data: {json.dumps(body)}\n\n"


DONE = "data: [DONE]\n\n"


async def run(
    server: LLMServer, *pieces: str, options: StreamOptions = KEY, **model: Any
) -> tuple[list[str], Any]:
    return await run_scripted(server, openai_model(server.base_url, **model), *pieces, options=options)


async def test_text_after_a_tool_call_joins_the_open_text_block(llm_server: LLMServer) -> None:
    events, final = await run(
        llm_server,
        chunk({"content": "A"}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_v", "function": {"name": "echo", "arguments": '{"value":"v"}'}}
                ]
            }
        ),
        chunk({"content": "B"}),
        chunk(finish="tool_calls"),
        DONE,
    )
    assert events == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="A"',
        "toolcall_start ci=1",
        'toolcall_delta ci=1 delta="{\\"value\\":\\"v\\"}"',
        'text_delta ci=0 delta="B"',
        'text_end ci=0 content="AB"',
        "toolcall_end ci=1 toolCall="
        '{"type":"toolCall","id":"call_v","name":"echo","arguments":{"value":"v"}}',
        "done reason=toolUse",
    ]
    assert final.stop_reason == "toolUse"


async def test_tool_call_arguments_are_parsed_while_they_stream(llm_server: LLMServer) -> None:
    pieces = ['{"val', 'ue": "hel', "lo wor", 'ld"}']
    llm_server.script(
        sse(
            *[
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1" if i == 0 else None,
                                "function": {"name": "echo", "arguments": p},
                            }
                        ]
                    }
                )
                for i, p in enumerate(pieces)
            ],
            chunk(finish="tool_calls"),
            DONE,
            delay=0.002,
        )
    )
    events, final = await collect(stream_simple(openai_model(llm_server.base_url), trace_context(), KEY))
    partial_args = [e.partial.content[0].arguments for e in events if e.type == "toolcall_delta"]  # type: ignore[union-attr]
    assert partial_args == [{}, {"value": "hel"}, {"value": "hello wor"}, {"value": "hello world"}]
    assert final.content == [ToolCall(id="c1", name="echo", arguments={"value": "hello world"})]


async def test_tool_calls_without_index_are_matched_by_id(llm_server: LLMServer) -> None:
    _, final = await run(
        llm_server,
        chunk({"tool_calls": [{"id": "a", "function": {"name": "echo", "arguments": '{"value":'}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "echo", "arguments": '{"value":"2"}'}}]}),
        chunk({"tool_calls": [{"id": "a", "function": {"arguments": '"1"}'}}]}),
        chunk(finish="tool_calls"),
    )
    assert [(c.id, c.arguments) for c in final.content] == [("a", {"value": "1"}), ("b", {"value": "2"})]


@pytest.mark.parametrize("field", ["reasoning", "reasoning_text"])
async def test_other_reasoning_fields_become_thinking(llm_server: LLMServer, field: str) -> None:
    _, final = await run(
        llm_server, chunk({field: "hmm"}), chunk({"content": "ok"}), chunk(finish="stop"), DONE
    )
    assert final.content == [
        ThinkingContent(thinking="hmm", thinking_signature=field),
        TextContent(text="ok"),
    ]


async def test_content_filter_is_an_error_after_closing_blocks(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, chunk({"content": "par"}), chunk(finish="content_filter"), DONE)
    assert events == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="par"',
        'text_end ci=0 content="par"',
        "error reason=error",
    ]
    assert (final.stop_reason, final.error_message) == ("error", "Provider finish_reason: content_filter")
    assert final.content == [TextContent(text="par")]


async def test_unknown_finish_reason_is_an_error(llm_server: LLMServer) -> None:
    _, final = await run(llm_server, chunk({"content": "x"}), chunk(finish="network_error"))
    assert final.error_message == "Provider finish_reason: network_error"


async def test_stream_without_finish_reason_or_done_still_stops(llm_server: LLMServer) -> None:
    events, final = await run(llm_server, chunk({"content": "x"}))
    assert events == [
        "start",
        "text_start ci=0",
        'text_delta ci=0 delta="x"',
        'text_end ci=0 content="x"',
        "done reason=stop",
    ]
    assert final.stop_reason == "stop"


async def test_error_chunk_mid_stream_becomes_the_error_message(llm_server: LLMServer) -> None:
    events, final = await run(
        llm_server,
        chunk({"content": "so"}),
        'data: {"error": {"message": "upstream overloaded", "code": 502}}\n\n',
    )
    assert events[-1] == "error reason=error"
    assert final.error_message == "upstream overloaded"
    assert final.content == [TextContent(text="so")]


async def test_unparsable_chunk_is_an_error(llm_server: LLMServer) -> None:
    _, final = await run(llm_server, "data: {not json\n\n")
    assert final.stop_reason == "error" and "Could not parse stream chunk" in final.error_message


async def test_http_error_with_a_plain_text_body(llm_server: LLMServer) -> None:
    llm_server.script(status(401, "invalid api key", {"content-type": "text/plain"}))
    events, final = await collect(stream_simple(openai_model(llm_server.base_url), trace_context(), KEY))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "401 invalid api key"


async def test_response_model_and_usage_variants(llm_server: LLMServer) -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 10},
    }
    _, final = await run(
        llm_server,
        chunk({"content": "x"}, model="gpt-test-2025"),
        chunk(finish="stop", usage=usage),
    )
    assert final.response_model == "gpt-test-2025"
    assert final.response_id == "chatcmpl-9"
    # cached_tokens includes the tokens written to the cache: reads are 20, writes 10, input 70.
    assert (final.usage.input, final.usage.cache_read, final.usage.cache_write, final.usage.total_tokens) == (
        70,
        20,
        10,
        110,
    )
    assert final.usage.cost.total == pytest.approx((70 * 3 + 10 * 15 + 20 * 0.3 + 10 * 3.75) / 1e6)


def test_deepseek_style_prompt_cache_hit_tokens() -> None:
    model = openai_model("http://127.0.0.1:1")
    usage = parse_usage({"prompt_tokens": 50, "completion_tokens": 5, "prompt_cache_hit_tokens": 40}, model)
    assert (usage.input, usage.cache_read, usage.output, usage.total_tokens) == (10, 40, 5, 55)


async def test_custom_base_url_and_headers_reach_the_server(llm_server: LLMServer) -> None:
    model = openai_model(
        llm_server.base_url, provider="ollama", id="llama3.1:8b", headers={"x-model": "m", "x-both": "model"}
    )
    llm_server.script(sse(chunk({"content": "hi"}), DONE))
    options = StreamOptions(api_key="k", headers={"x-call": "c", "x-both": "call"})
    final = await stream_simple(model, trace_context(), options).result()
    assert final.content == [TextContent(text="hi")]
    request = llm_server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert (request.headers["x-model"], request.headers["x-call"], request.headers["x-both"]) == (
        "m",
        "c",
        "call",
    )
    assert request.json["model"] == "llama3.1:8b"


async def test_missing_api_key_is_an_error_event_where_pi_throws() -> None:
    model = openai_model("https://api.openai.com")
    events, final = await collect(stream_simple(model, trace_context(), StreamOptions()))
    assert compact(events) == ["error reason=error"]
    assert final.error_message == "No API key for provider: openai"


async def test_api_key_from_environment(llm_server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    llm_server.script(sse(chunk(finish="stop")))
    await stream_simple(openai_model(llm_server.base_url), trace_context(), StreamOptions()).result()
    assert llm_server.requests[0].headers["authorization"] == "Bearer env-key"


async def test_local_server_needs_no_api_key(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk({"content": "ok"}), DONE))
    final = await stream_simple(openai_model(llm_server.base_url), trace_context(), StreamOptions()).result()
    assert final.stop_reason == "stop"
    assert "authorization" not in llm_server.requests[0].headers


async def test_on_event_and_on_payload(llm_server: LLMServer) -> None:
    received = 0

    def tick() -> None:
        nonlocal received
        received += 1

    def payload(body: dict[str, Any], model: Any) -> dict[str, Any]:
        return {**body, "user": "u-1"}

    llm_server.script(sse(chunk({"content": "a"}), chunk({"content": "b"}), DONE, delay=0.005))
    options = StreamOptions(api_key="k", on_event=tick, on_payload=payload)  # type: ignore[arg-type]
    await stream_simple(openai_model(llm_server.base_url), trace_context(), options).result()
    assert received >= 4  # the response head and each of the three body pieces
    assert llm_server.requests[0].json["user"] == "u-1"


def test_request_for_a_reasoning_model_with_effort_and_temperature() -> None:
    model = openai_model("https://api.openai.com/v1", id="o4-mini", reasoning=True)
    options = StreamOptions(max_tokens=100, temperature=0.2, session_id="s-1")
    body = build_request_body(model, trace_context(), options)
    assert body["messages"][0] == {"role": "developer", "content": "sys"}
    assert body["max_completion_tokens"] == 100 and body["temperature"] == 0.2
    assert body["prompt_cache_key"] == "s-1"
    assert "reasoning_effort" not in body

    body = build_request_body(model, trace_context(), OpenAICompletionsOptions(reasoning_effort="high"))
    assert body["reasoning_effort"] == "high"


def test_compat_for_known_hosts_and_explicit_flags() -> None:
    groq_like = openai_model("https://api.x.ai/v1", provider="xai")
    compat = detect_compat(groq_like)
    assert (
        not compat.supports_store
        and not compat.supports_developer_role
        and not compat.supports_reasoning_effort
    )
    custom = openai_model("http://h/v1", compat={"maxTokensField": "max_tokens", "supportsStrictMode": False})
    body = build_request_body(custom, trace_context(), StreamOptions(max_tokens=7))
    assert body["max_tokens"] == 7 and "max_completion_tokens" not in body
    assert "strict" not in body["tools"][0]["function"]


def test_message_conversion() -> None:
    model = openai_model("http://h/v1", input=["text", "image"])
    same = {"api": model.api, "provider": model.provider, "model": model.id}
    image = ImageContent(data="QUJD", mime_type="image/png")
    context = Context(
        system_prompt="sys",
        messages=[
            UserMessage(content=[TextContent(text="look"), image]),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking="plan", thinking_signature="reasoning_content"),
                    TextContent(text="Calling "),
                    TextContent(text="two."),
                    ToolCall(id="t1", name="echo", arguments={"value": "a"}),
                    ToolCall(id="t2", name="echo", arguments={"value": "b"}),
                ],
                stop_reason="toolUse",
                **same,
            ),
            ToolResultMessage(tool_call_id="t1", tool_name="echo", content=[TextContent(text="A")]),
            ToolResultMessage(tool_call_id="t2", tool_name="echo", content=[image], is_error=False),
            AssistantMessage(content=[TextContent(text="cut")], stop_reason="aborted", **same),
            AssistantMessage(content=[TextContent(text="other")], api="x", provider="y", model="z"),
            AssistantMessage(
                content=[ToolCall(id="orphan", name="echo", arguments={})], stop_reason="toolUse", **same
            ),
            UserMessage(content="next"),
        ],
    )
    messages = convert_messages(model, context, detect_compat(model))
    assert messages == [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Calling two.",
            "reasoning_content": "plan",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "echo", "arguments": '{"value":"a"}'}},
                {"id": "t2", "type": "function", "function": {"name": "echo", "arguments": '{"value":"b"}'}},
            ],
        },
        {"role": "tool", "content": "A", "tool_call_id": "t1"},
        {"role": "tool", "content": "(see attached image)", "tool_call_id": "t2"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attached image(s) from tool result:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
            ],
        },
        {"role": "assistant", "content": "other"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "orphan", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "No result provided", "tool_call_id": "orphan"},
        {"role": "user", "content": "next"},
    ]


def test_tools_are_sent_empty_when_history_has_tool_calls() -> None:
    model = openai_model("http://h/v1")
    context = Context(
        messages=[
            AssistantMessage(
                content=[ToolCall(id="t", name="x", arguments={})],
                api=model.api,
                provider="openai",
                model="gpt-test",
            ),
            ToolResultMessage(tool_call_id="t", tool_name="x", content=[TextContent(text="r")]),
        ]
    )
    assert build_request_body(model, context, StreamOptions())["tools"] == []


async def test_raw_stream_sends_no_output_cap(llm_server: LLMServer) -> None:
    llm_server.script(sse(chunk(finish="stop")))
    await stream_openai_completions(openai_model(llm_server.base_url), trace_context(), KEY).result()
    assert "max_completion_tokens" not in llm_server.requests[0].json


async def test_assembler_is_usable_without_io() -> None:
    model = openai_model("http://h/v1")
    stream = AssistantMessageEventStream()
    assembler = ChunkAssembler(model, new_output(model), stream)
    assembler.feed_chunk({"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]})
    assembler.finish()
    stream.end()
    assert [e.type async for e in stream] == ["text_start", "text_delta", "text_end"]
