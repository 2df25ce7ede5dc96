"""The faux provider: scripted registrations (pi's registerFauxProvider) and faux/echo."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from agent_core import Agent, AgentEvent
from agent_core.abort import AbortController, AbortSignal
from agent_core.event_stream import AssistantMessageEventStream
from agent_core.events import AssistantMessageEvent, ToolCallDeltaEvent
from agent_core.llm import Context, Model, StreamOptions, Tool
from agent_core.messages import AssistantMessage, TextContent, ToolResultMessage, UserMessage
from agent_core.models import resolve_model
from agent_core.providers import (
    FauxProvider,
    faux_assistant_message,
    faux_text,
    faux_thinking,
    faux_tool_call,
    get_api_provider,
    register_faux_provider,
    stream_simple,
)
from agent_core.providers._common import running_producers
from agent_core.providers.faux import serialize_context
from agent_core.providers.faux_echo import pace_ms, split_words
from tests.agent_core.providers.helpers import collect, compact, load_trace


@pytest.fixture
def faux() -> Any:
    handle = register_faux_provider(token_size=(1, 1))
    try:
        yield handle
    finally:
        handle.unregister()


def _trace_notation(events: list[AssistantMessageEvent]) -> list[str]:
    """Our events written the way trace 29 writes message_update lines."""
    lines = []
    for event in events:
        data = event.dump()
        if event.type in ("start", "done", "error"):
            continue
        line = f"message_update {event.type}"
        if "delta" in data:
            line += f" {json.dumps(data['delta'])}"
        lines.append(line + f" [ci={data['contentIndex']}]")
    return lines


def _trace_turns() -> list[list[str]]:
    """The message_update lines of each assistant message of trace 29."""
    turns: list[list[str]] = []
    for line in load_trace("29_faux_provider_agent")["compact"]:
        if line.startswith("message_start assistant"):
            turns.append([])
        elif line.startswith("message_update"):
            turns[-1].append(line)
    return turns


# The trace does not record the tool definition; this one serialises to the same 151 characters,
# which is what the usage estimate of trace 29 (46 then 65 input tokens) depends on.
ECHO_TOOL = Tool(
    name="echo",
    description="Echo back the given text",
    parameters={"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]},
)


async def test_chunking_and_usage_reproduce_trace_29(faux: FauxProvider) -> None:
    first = faux_assistant_message(
        [
            faux_thinking("think!"),
            faux_text("Calling tool"),
            faux_tool_call("echo", {"value": "hi"}, id="call-1"),
        ],
        stop_reason="toolUse",
    )
    faux.set_responses([first, faux_assistant_message("All done.")])
    model = faux.get_model()
    assert model is not None
    context = Context(
        system_prompt="sys", messages=[UserMessage(content=[TextContent(text="hello")])], tools=[ECHO_TOOL]
    )

    events, reply = await collect(stream_simple(model, context, StreamOptions()))
    assert _trace_notation(events) == _trace_turns()[0]
    assert (reply.usage.input, reply.usage.output, reply.usage.total_tokens) == (46, 10, 56)
    assert reply.usage.cost.total == 0
    assert reply.stop_reason == "toolUse"
    assert reply.api == faux.api and reply.provider == "faux" and reply.model == "faux-1"

    context.messages.append(reply)
    context.messages.append(
        ToolResultMessage(tool_call_id="call-1", tool_name="echo", content=[TextContent(text="echoed: hi")])
    )
    events, reply = await collect(stream_simple(model, context, StreamOptions()))
    assert _trace_notation(events) == _trace_turns()[1]
    assert (reply.usage.input, reply.usage.output, reply.usage.total_tokens) == (65, 3, 68)
    assert faux.call_count == 2 and faux.pending_response_count == 0


async def test_tool_arguments_stay_empty_until_toolcall_end(faux: FauxProvider) -> None:
    faux.set_responses(
        [faux_assistant_message([faux_tool_call("echo", {"value": "hello"})], stop_reason="toolUse")]
    )
    model = faux.get_model()
    assert model is not None
    stream = stream_simple(model, Context(messages=[UserMessage(content="x")]))
    events, seen = [], []
    async for event in stream:  # the partial is live: look at it when the event arrives
        events.append(event)
        if isinstance(event, ToolCallDeltaEvent):
            seen.append(dict(event.partial.content[0].arguments))  # type: ignore[union-attr]
    reply = await stream.result()
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert "".join(d.delta for d in deltas) == '{"value":"hello"}'
    assert seen == [{}] * len(deltas)
    end = events[-2]
    assert end.type == "toolcall_end" and end.tool_call.arguments == {"value": "hello"}  # type: ignore[union-attr]
    assert reply.content[0].id.startswith("tool:")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("token_size", "expected"),
    [
        ((1, 1), (1, 1)),
        ({"min": 1, "max": 1}, (1, 1)),  # pi's form
        ({"min": 2, "max": 6}, (2, 6)),
        ({"max": 2}, (2, 2)),  # pi's defaults (min 3, max 5) fill a missing key
        ({}, (3, 5)),
        ([4, 2], (2, 2)),
        ((0, 0), (1, 1)),
    ],
)
async def test_token_size_takes_a_pair_or_pis_min_max_mapping(
    token_size: Any, expected: tuple[int, int]
) -> None:
    handle = register_faux_provider(token_size=token_size)
    try:
        assert handle.token_size == expected
        handle.set_responses([faux_assistant_message("abcdefghij")])
        model = handle.get_model()
        assert model is not None
        events, _ = await collect(stream_simple(model, Context(messages=[UserMessage(content="x")])))
        low, high = expected
        sizes = [len(e.delta) for e in events if e.type == "text_delta"]  # type: ignore[union-attr]
        assert sum(sizes) == 10
        assert all(low * 4 <= size <= high * 4 for size in sizes[:-1])
    finally:
        handle.unregister()


@pytest.mark.parametrize(
    "token_size", [{"minimum": 1}, {"min": "1", "max": 2}, (1,), (1, 2, 3), 4, "1,1", (1.5, 2), (True, 2)]
)
def test_token_size_of_another_form_is_a_type_error_naming_the_expected_form(token_size: Any) -> None:
    with pytest.raises(TypeError, match=r'token_size must be \(min, max\) or \{"min": int, "max": int\}'):
        register_faux_provider(token_size=token_size)


async def test_an_agent_listener_raising_mid_stream_stops_the_faux_stream(faux: FauxProvider) -> None:
    faux.set_responses([faux_assistant_message("x" * 400)])  # 100 deltas, one loop tick apart
    streams: list[AssistantMessageEventStream] = []

    def stream_fn(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        streams.append(faux.stream(model, context, options))
        return streams[-1]

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_update":
            raise RuntimeError("listener broke")

    agent = Agent(initial_state={"model": faux.model}, stream_fn=stream_fn)
    agent.subscribe(listener)
    await agent.prompt("hi")
    assert not streams[0].producing
    assert running_producers() == 0
    final = await streams[0].result()
    assert (final.stop_reason, final.error_message) == ("aborted", "Request was aborted")
    last = agent.state.messages[-1]
    assert (last.role, last.error_message) == ("assistant", "listener broke")  # type: ignore[union-attr]


async def test_a_stream_closed_before_its_producer_ran_ends_with_an_aborted_event() -> None:
    stream = stream_simple(_echo_model(), Context(messages=[UserMessage(content="hi")]))
    await stream.aclose()
    events, final = await collect(stream)  # an error event, as from any stream function: no raise
    assert compact(events) == ["error reason=aborted"]
    assert (final.stop_reason, final.error_message) == ("aborted", "Request was aborted")
    assert not stream.producing


async def test_callable_steps_see_context_state_and_model(faux: FauxProvider) -> None:
    seen: list[tuple[str, int, str]] = []

    def step(context: Context, options: StreamOptions, state: Any, model: Model) -> AssistantMessage:
        seen.append((context.messages[-1].content, state.call_count, model.id))  # type: ignore[arg-type]
        return faux_assistant_message("sync")

    async def async_step(
        context: Context, options: StreamOptions, state: Any, model: Model
    ) -> AssistantMessage:
        await asyncio.sleep(0)
        return faux_assistant_message("async")

    faux.set_responses([step])
    faux.append_responses([async_step])
    assert faux.pending_response_count == 2
    model = faux.get_model()
    assert model is not None
    first = await stream_simple(model, Context(messages=[UserMessage(content="q1")])).result()
    second = await stream_simple(model, Context(messages=[UserMessage(content="q2")])).result()
    assert [first.content[0].text, second.content[0].text] == ["sync", "async"]  # type: ignore[union-attr]
    assert seen == [("q1", 1, "faux-1")]


async def test_empty_queue_and_failing_step_are_errors(faux: FauxProvider) -> None:
    model = faux.get_model()
    assert model is not None
    events, reply = await collect(stream_simple(model, Context(messages=[UserMessage(content="x")])))
    assert compact(events) == ["error reason=error"]
    assert reply.error_message == "No more faux responses queued"

    def broken(*_: Any) -> AssistantMessage:
        raise RuntimeError("script bug")

    faux.set_responses([broken])
    reply = await stream_simple(model, Context(messages=[UserMessage(content="x")])).result()
    assert (reply.stop_reason, reply.error_message) == ("error", "script bug")


async def test_scripted_error_message_ends_with_error_event(faux: FauxProvider) -> None:
    faux.set_responses([faux_assistant_message("partial", stop_reason="error", error_message="overloaded")])
    model = faux.get_model()
    assert model is not None
    events, reply = await collect(stream_simple(model, Context(messages=[UserMessage(content="x")])))
    assert compact(events)[-1] == "error reason=error"
    assert reply.error_message == "overloaded" and reply.content[0].text == "partial"  # type: ignore[union-attr]


async def test_abort_is_checked_per_chunk(faux: FauxProvider) -> None:
    faux.tokens_per_second = 200  # 20 ms per 4-character chunk
    faux.set_responses([faux_assistant_message("abcdefghijklmnopqrstuvwxyz" * 4)])
    model = faux.get_model()
    assert model is not None
    controller = AbortController()
    stream = stream_simple(
        model, Context(messages=[UserMessage(content="x")]), StreamOptions(signal=controller.signal)
    )
    events = []
    async for event in stream:
        events.append(event)
        if event.type == "text_delta" and len(events) == 4:
            controller.abort()
    reply = await stream.result()
    assert (reply.stop_reason, reply.error_message) == ("aborted", "Request was aborted")
    assert reply.content[0].text == "abcdefgh"  # type: ignore[union-attr]
    assert compact(events)[-1] == "error reason=aborted"


async def test_a_stream_behind_its_pace_still_lets_the_consumer_abort_between_chunks(
    faux: FauxProvider,
) -> None:
    faux.tokens_per_second = 200  # 20 ms per 4-character chunk
    faux.set_responses([faux_assistant_message("abcdefghijklmnopqrstuvwxyz" * 4)])
    model = faux.get_model()
    assert model is not None
    controller = AbortController()
    stream = stream_simple(
        model, Context(messages=[UserMessage(content="x")]), StreamOptions(signal=controller.signal)
    )
    deltas = 0
    async for event in stream:
        if event.type == "text_delta":
            deltas += 1
            if deltas == 1:
                time.sleep(0.12)  # the loop stalls: several chunks come due at once
            elif deltas == 2:
                controller.abort()
    reply = await stream.result()
    assert reply.stop_reason == "aborted"
    assert reply.content[0].text == "abcdefgh"  # type: ignore[union-attr]


async def test_session_id_simulates_prompt_caching(faux: FauxProvider) -> None:
    faux.set_responses([faux_assistant_message("one"), faux_assistant_message("two")])
    model = faux.get_model()
    assert model is not None
    context = Context(system_prompt="s" * 40, messages=[UserMessage(content="first")])
    options = StreamOptions(session_id="abc")
    first = await stream_simple(model, context, options).result()
    assert first.usage.cache_read == 0 and first.usage.cache_write == first.usage.input > 0
    context.messages.append(UserMessage(content="second"))
    second = await stream_simple(model, context, options).result()
    assert second.usage.cache_read > 0
    assert second.usage.input == max(0, -(-len(serialize_context(context)) // 4) - second.usage.cache_read)


async def test_unregister_removes_the_api() -> None:
    handle = register_faux_provider(api="faux-test-api", models=["m1", {"id": "m2", "reasoning": True}])
    assert get_api_provider("faux-test-api") is not None
    m2 = handle.get_model("m2")
    assert m2 is not None and m2.reasoning and m2.api == "faux-test-api"
    assert handle.get_model("missing") is None
    handle.unregister()
    reply = await stream_simple(m2, Context()).result()
    assert reply.error_message == "No API provider registered for api: faux-test-api"


# --- faux/echo ---------------------------------------------------------------------------------


def _echo_model(pace: float = 0) -> Model:
    return resolve_model("faux/echo").model_copy(update={"compat": {"paceMs": pace}})


async def _ask(
    text: str, model: Model | None = None, **options: Any
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    context = Context(messages=[UserMessage(content=text)])
    return await collect(stream_simple(model or _echo_model(), context, StreamOptions(**options)))


async def test_echo_streams_one_word_per_delta() -> None:
    events, reply = await _ask("hello  big world")
    assert [e.delta for e in events if e.type == "text_delta"] == ["echo: ", "hello  ", "big ", "world"]  # type: ignore[union-attr]
    assert reply.content == [TextContent(text="echo: hello  big world")]
    assert (reply.api, reply.provider, reply.model, reply.stop_reason) == ("faux", "faux", "echo", "stop")
    assert reply.usage.output == 6 and reply.usage.input > 0


def test_split_words_keeps_every_character() -> None:
    for text in ["", "  ", " lead and trail ", "one", "a\nb\tc  "]:
        assert "".join(split_words(text)) == text


async def test_echo_answers_a_tool_result_with_its_text() -> None:
    _, call = await _ask('!tool read {"path": "a.txt"}')
    assert call.stop_reason == "toolUse"
    tool_call = call.content[0]
    assert (tool_call.name, tool_call.arguments) == ("read", {"path": "a.txt"})  # type: ignore[union-attr]
    context = Context(
        messages=[
            UserMessage(content='!tool read {"path": "a.txt"}'),
            call,
            ToolResultMessage(
                tool_call_id=tool_call.id, tool_name="read", content=[TextContent(text="file body")]
            ),  # type: ignore[union-attr]
        ]
    )
    reply = await stream_simple(_echo_model(), context).result()
    assert reply.content == [TextContent(text="echo: file body")]


async def test_echo_directives() -> None:
    events, think = await _ask("!think deep thought")
    assert [b.type for b in think.content] == ["thinking", "text"]
    assert think.content[0].thinking == "deep thought"  # type: ignore[union-attr]
    assert think.content[1].text == "echo: deep thought"  # type: ignore[union-attr]
    assert [e.delta for e in events if e.type == "thinking_delta"] == ["deep ", "thought"]  # type: ignore[union-attr]

    events, _ = await _ask("!long 5")
    assert [e.delta for e in events if e.type == "text_delta"] == ["w1 ", "w2 ", "w3 ", "w4 ", "w5"]  # type: ignore[union-attr]

    events, error = await _ask("!error the model fell over")
    assert compact(events) == ["start", "error reason=error"]
    assert (error.stop_reason, error.error_message) == ("error", "the model fell over")

    _, bad = await _ask("!tool read {not json")
    assert bad.stop_reason == "error" and "not JSON" in (bad.error_message or "")

    _, plain = await _ask("!unknown directive")
    assert plain.content == [TextContent(text="echo: !unknown directive")]


async def test_echo_stops_at_the_requests_max_tokens_like_a_real_model() -> None:
    events, reply = await _ask("!long 100", max_tokens=10)  # 10 tokens: 40 characters
    text = reply.content[0].text  # type: ignore[union-attr]
    assert reply.stop_reason == "length"
    assert text == "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 "
    assert "".join(e.delta for e in events if e.type == "text_delta") == text  # type: ignore[union-attr]
    _, short = await _ask("hello", max_tokens=10)
    assert (short.stop_reason, short.content) == ("stop", [TextContent(text="echo: hello")])
    _, unlimited = await _ask("!long 100")
    assert unlimited.stop_reason == "stop" and unlimited.content[0].text.endswith("w100")  # type: ignore[union-attr]


async def test_echo_sleep_waits_then_echoes_and_honours_abort() -> None:
    started = time.monotonic()
    _, reply = await _ask("!sleep 150 wake up")
    assert time.monotonic() - started >= 0.14
    assert reply.content == [TextContent(text="echo: wake up")]

    controller = AbortController()
    asyncio.get_running_loop().call_later(0.05, controller.abort)
    started = time.monotonic()
    events, reply = await _ask("!sleep 5000", signal=controller.signal)
    assert time.monotonic() - started < 1
    assert compact(events) == ["start", "error reason=aborted"]
    assert reply.error_message == "Request was aborted"


async def test_echo_pace_from_model_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    model = resolve_model("faux/echo")
    monkeypatch.delenv("GATEWAY_FAUX_PACE_MS", raising=False)
    assert pace_ms(model) == 10
    monkeypatch.setenv("GATEWAY_FAUX_PACE_MS", "0")
    assert pace_ms(model) == 0
    assert pace_ms(_echo_model(pace=25)) == 25

    monkeypatch.setenv("GATEWAY_FAUX_PACE_MS", "30")
    started = time.monotonic()
    await _ask("a b c d e", model=model)  # 6 words
    assert time.monotonic() - started >= 0.17


async def test_echo_abort_between_deltas_keeps_partial_text() -> None:
    controller = AbortController()
    stream = stream_simple(
        _echo_model(pace=20),
        Context(messages=[UserMessage(content="!long 100")]),
        StreamOptions(signal=controller.signal),
    )
    count = 0
    async for event in stream:
        if event.type == "text_delta":
            count += 1
            if count == 3:
                controller.abort()
    reply = await stream.result()
    assert reply.stop_reason == "aborted"
    assert reply.content[0].text == "w1 w2 w3 "  # type: ignore[union-attr]


async def test_echo_calls_on_event_for_every_event() -> None:
    calls = 0

    def tick() -> None:
        nonlocal calls
        calls += 1

    events, _ = await _ask("one two", on_event=tick)
    assert calls == len(events)


async def test_unknown_builtin_faux_model_is_an_error() -> None:
    model = _echo_model().model_copy(update={"id": "nope", "compat": None})
    reply = await stream_simple(model, Context()).result()
    assert reply.stop_reason == "error" and "Unknown faux model: nope" in (reply.error_message or "")


async def test_a_registration_over_the_builtin_api_gives_it_back() -> None:
    handle = register_faux_provider(api="faux")
    handle.set_responses([faux_assistant_message("scripted")])
    echo = resolve_model("faux/echo")
    assert (await stream_simple(echo, Context()).result()).content == [TextContent(text="scripted")]
    handle.unregister()
    reply = await stream_simple(_echo_model(), Context(messages=[UserMessage(content="back")])).result()
    assert reply.content == [TextContent(text="echo: back")]


def test_stream_functions_called_without_an_event_loop_do_not_raise() -> None:
    stream = stream_simple(_echo_model(), Context())
    assert stream.done
    assert asyncio.run(stream.result()).error_message == "Stream functions need a running event loop"
