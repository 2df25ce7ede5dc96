"""The agent loop beyond the recorded traces: hooks, tool execution modes, stream handling, the
EventStream entry points and the ownership of the loop's tasks."""

from __future__ import annotations

import asyncio
import gc
import sys
import types
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent_core import (
    AbortController,
    AbortSignal,
    AfterToolCallContext,
    AfterToolCallResult,
    AgentContext,
    AgentCoreError,
    AgentEvent,
    AgentLoopConfig,
    AgentMessage,
    AgentOptions,
    AgentTool,
    AgentToolResult,
    AssistantMessageEventStream,
    BeforeToolCallContext,
    BeforeToolCallResult,
    Context,
    ContinueError,
    CustomMessage,
    DoneEvent,
    Model,
    StartEvent,
    StreamOptions,
    TextDeltaEvent,
    ToolUpdateCallback,
    UserMessage,
    agent_loop,
    agent_loop_continue,
    run_agent_loop,
    run_agent_loop_continue,
)
from tests.agent_core._compact import Recorder, render
from tests.agent_core._scripted import (
    MODEL,
    Producer,
    ScriptedStream,
    assistant,
    call,
    done_only,
    text,
    text_reply,
    user,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"value": {"type": "string"}},
    "required": ["value"],
}

Body = Callable[[str, Any, AbortSignal | None, ToolUpdateCallback | None], Awaitable[AgentToolResult]]


def tool(
    name: str, body: Body, *, execution_mode: Any = None, schema: dict[str, Any] | None = None
) -> AgentTool:
    return AgentTool(
        name=name,
        label=name,
        description=name,
        parameters=schema or SCHEMA,
        execute=body,
        execution_mode=execution_mode,
    )


def answer(value: Any, **extra: Any) -> AgentToolResult:
    return AgentToolResult(content=[text(f"echoed: {value}")], details={"value": value}, **extra)


def recording_tool(executed: list[Any], name: str = "echo", **kwargs: Any) -> AgentTool:
    async def body(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: Any
    ) -> AgentToolResult:
        executed.append(params["value"])
        return answer(params["value"])

    return tool(name, body, **kwargs)


def calls(*pairs: tuple[str, str], name: str = "echo") -> Producer:
    return done_only(assistant(*(call(i, name, {"value": v}) for i, v in pairs), stop_reason="toolUse"))


DONE = done_only(assistant(text("done")))


async def run(
    *responses: Producer,
    tools: list[AgentTool] | None = None,
    config: AgentLoopConfig | None = None,
    signal: AbortSignal | None = None,
) -> tuple[Recorder, list[AgentMessage], ScriptedStream]:
    rec = Recorder()
    async with ScriptedStream(*responses) as script:
        result = await run_agent_loop(
            [user("go")],
            AgentContext(tools=tools or []),
            config or AgentLoopConfig(model=MODEL),
            rec.event,
            signal,
            script,
        )
    return rec, result, script


def ends(rec: Recorder) -> list[tuple[str, bool, str]]:
    return [
        (e["toolCallId"], e["isError"], e["result"]["content"][0]["text"])
        for e in rec.events
        if e["type"] == "tool_execution_end"
    ]


# --- before/after hooks -----------------------------------------------------------------------


async def test_before_tool_call_mutated_args_are_executed_without_revalidation() -> None:
    executed: list[Any] = []

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        ctx.args["value"] = 123  # not a string: the schema would reject it

    rec, _, _ = await run(
        calls(("tool-1", "hello")),
        DONE,
        tools=[recording_tool(executed)],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(before_tool_call=before)),
    )
    assert executed == [123]
    assert ends(rec) == [("tool-1", False, "echoed: 123")]


async def test_before_tool_call_sees_the_raw_call_and_validated_args() -> None:
    seen: list[tuple[dict[str, Any], Any]] = []

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        seen.append((ctx.tool_call.arguments, ctx.args))
        assert [m.role for m in ctx.context.messages] == ["user", "assistant"]
        assert ctx.assistant_message.stop_reason == "toolUse"

    await run(
        done_only(assistant(call("tool-1", "echo", {"value": 7}), stop_reason="toolUse")),
        DONE,
        tools=[recording_tool([])],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(before_tool_call=before)),
    )
    assert seen == [({"value": 7}, {"value": "7"})]


@pytest.mark.parametrize(
    ("reason", "expected"), [("not allowed here", "not allowed here"), (None, "Tool execution was blocked")]
)
async def test_before_tool_call_block_becomes_an_error_result(reason: str | None, expected: str) -> None:
    executed: list[Any] = []

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> BeforeToolCallResult:
        return BeforeToolCallResult(block=True, reason=reason)

    rec, result, _ = await run(
        calls(("tool-1", "x")),
        DONE,
        tools=[recording_tool(executed)],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(before_tool_call=before)),
    )
    assert executed == []
    assert ends(rec) == [("tool-1", True, expected)]
    tool_result = result[2]
    assert tool_result.dump()["details"] == {}
    assert tool_result.dump()["isError"] is True


async def test_before_tool_call_raise_becomes_an_error_result() -> None:
    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        raise ValueError("policy check failed")

    rec, _, _ = await run(
        calls(("tool-1", "x")),
        DONE,
        tools=[recording_tool([])],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(before_tool_call=before)),
    )
    assert ends(rec) == [("tool-1", True, "policy check failed")]


async def test_after_tool_call_overrides_field_by_field() -> None:
    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> AfterToolCallResult:
        assert ctx.is_error is False
        assert ctx.result.details == {"value": "a"}
        return AfterToolCallResult(content=[text("rewritten")], is_error=True)

    rec, result, _ = await run(
        calls(("tool-1", "a")),
        DONE,
        tools=[recording_tool([])],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(after_tool_call=after)),
    )
    end = next(e for e in rec.events if e["type"] == "tool_execution_end")
    assert end["result"] == {"content": [{"type": "text", "text": "rewritten"}], "details": {"value": "a"}}
    assert end["isError"] is True
    assert render(result[2]) == "toolResult(tool-1,echo,isError=true):rewritten"


async def test_after_tool_call_can_terminate_the_batch() -> None:
    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> AfterToolCallResult:
        return AfterToolCallResult(terminate=True)

    rec, result, script = await run(
        calls(("tool-1", "a")),
        tools=[recording_tool([])],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(after_tool_call=after)),
    )
    assert len(script.calls) == 1
    assert [m.role for m in result] == ["user", "assistant", "toolResult"]
    end = next(e for e in rec.events if e["type"] == "tool_execution_end")
    assert end["result"]["terminate"] is True
    assert "terminate" not in result[2].dump()


async def test_after_tool_call_raise_becomes_an_error_result() -> None:
    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> None:
        raise RuntimeError("after hook broke")

    rec, result, _ = await run(
        calls(("tool-1", "a")),
        DONE,
        tools=[recording_tool([])],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(after_tool_call=after)),
    )
    assert ends(rec) == [("tool-1", True, "after hook broke")]
    assert result[2].dump()["details"] == {}


async def test_a_tool_that_raises_gives_an_error_result_with_its_text() -> None:
    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        raise OSError("disk on fire")

    seen: list[bool] = []

    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> None:
        seen.append(ctx.is_error)

    rec, _, script = await run(
        calls(("tool-1", "a")),
        DONE,
        tools=[tool("echo", body)],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(after_tool_call=after)),
    )
    assert ends(rec) == [("tool-1", True, "disk on fire")]
    assert seen == [True]
    assert len(script.calls) == 2  # the loop goes on and shows the error to the model


async def test_prepare_arguments_raising_becomes_an_error_result() -> None:
    def prepare(raw: Any) -> Any:
        raise ValueError("cannot read legacy arguments")

    echo = recording_tool([])
    echo.prepare_arguments = prepare
    rec, _, _ = await run(calls(("tool-1", "a")), DONE, tools=[echo])
    assert ends(rec) == [("tool-1", True, "cannot read legacy arguments")]


# --- execution modes --------------------------------------------------------------------------


def overlap_probe(log: list[str]) -> Body:
    """A tool whose `first` call waits 20 ms; records when each call starts and ends."""

    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        log.append(f"begin:{params['value']}")
        if params["value"] == "first":
            await asyncio.sleep(0.02)
        log.append(f"end:{params['value']}")
        return answer(params["value"])

    return body


def parallel_observed(log: list[str]) -> bool:
    return log.index("begin:second") < log.index("end:first")


async def test_parallel_tools_overlap_end_in_completion_order_and_persist_in_source_order() -> None:
    log: list[str] = []
    rec, result, _ = await run(
        calls(("tool-1", "first"), ("tool-2", "second")), DONE, tools=[tool("echo", overlap_probe(log))]
    )
    assert parallel_observed(log)
    assert [e[0] for e in ends(rec)] == ["tool-2", "tool-1"]
    results = [
        e["message"]["toolCallId"]
        for e in rec.events
        if e["type"] == "message_end" and e["message"]["role"] == "toolResult"
    ]
    assert results == ["tool-1", "tool-2"]
    turn_end = next(e for e in rec.events if e["type"] == "turn_end")
    assert [r["toolCallId"] for r in turn_end["toolResults"]] == ["tool-1", "tool-2"]
    assert [m.role for m in result] == ["user", "assistant", "toolResult", "toolResult", "assistant"]


async def test_sequential_config_runs_tools_one_after_another() -> None:
    log: list[str] = []
    await run(
        calls(("tool-1", "first"), ("tool-2", "second")),
        DONE,
        tools=[tool("echo", overlap_probe(log))],
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(tool_execution="sequential")),
    )
    assert log == ["begin:first", "end:first", "begin:second", "end:second"]


async def test_one_sequential_tool_forces_the_whole_batch_sequential() -> None:
    log: list[str] = []
    probe = overlap_probe(log)
    tools = [tool("echo", probe), tool("slow", probe, execution_mode="sequential")]
    producer = done_only(
        assistant(
            call("tool-1", "echo", {"value": "first"}),
            call("tool-2", "slow", {"value": "second"}),
            stop_reason="toolUse",
        )
    )
    rec, _, _ = await run(producer, DONE, tools=tools)
    assert not parallel_observed(log)
    assert log[0] == "begin:first"
    assert [e[0] for e in ends(rec)] == ["tool-1", "tool-2"]


async def test_tools_that_all_say_parallel_run_in_parallel() -> None:
    log: list[str] = []
    await run(
        calls(("tool-1", "first"), ("tool-2", "second")),
        DONE,
        tools=[tool("echo", overlap_probe(log), execution_mode="parallel")],
    )
    assert parallel_observed(log)


async def test_parallel_hooks_run_in_preflight_then_finalise_in_completion_order() -> None:
    order: list[str] = []
    delays = {"a": 0.03, "b": 0.015, "c": 0.0}

    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        order.append(f"exec {params['value']}")
        await asyncio.sleep(delays[params["value"]])
        return answer(params["value"])

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        order.append(f"before {ctx.args['value']}")

    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> None:
        order.append(f"after {ctx.args['value']}")

    rec = Recorder()

    def sink(event: AgentEvent) -> None:
        rec.event(event)
        if event.type in ("tool_execution_start", "tool_execution_end"):
            order.append(f"{event.type.removeprefix('tool_execution_')} {event.tool_call_id}")

    async with ScriptedStream(calls(("a", "a"), ("b", "b"), ("c", "c")), DONE) as script:
        options = AgentOptions(before_tool_call=before, after_tool_call=after)
        config = AgentLoopConfig(model=MODEL, options=options)
        await run_agent_loop(
            [user("go")], AgentContext(tools=[tool("echo", body)]), config, sink, None, script
        )
    assert order == [
        "start a", "before a", "start b", "before b", "start c", "before c",
        "exec a", "exec b", "exec c",
        "after c", "end c", "after b", "end b", "after a", "end a",
    ]  # fmt: skip
    results = [
        e["message"]["toolCallId"]
        for e in rec.events
        if e["type"] == "message_end" and e["message"]["role"] == "toolResult"
    ]
    assert results == ["a", "b", "c"]


async def test_partial_terminate_lets_the_loop_continue() -> None:
    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        return answer(params["value"], terminate=tool_call_id == "tool-1")

    _, result, script = await run(calls(("tool-1", "a"), ("tool-2", "b")), DONE, tools=[tool("echo", body)])
    assert len(script.calls) == 2
    assert [m.role for m in result] == ["user", "assistant", "toolResult", "toolResult", "assistant"]


async def test_an_immediate_error_in_the_batch_prevents_termination() -> None:
    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        return answer(params["value"], terminate=True)

    producer = done_only(
        assistant(
            call("tool-1", "echo", {"value": "a"}), call("tool-2", "missing", {}), stop_reason="toolUse"
        )
    )
    _, _, script = await run(producer, DONE, tools=[tool("echo", body)])
    assert len(script.calls) == 2


# --- tool updates and signals -------------------------------------------------------------------


async def test_tool_updates_are_emitted_between_start_and_end_with_raw_args() -> None:
    async def body(
        tool_call_id: str, params: Any, signal: Any, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        assert on_update is not None
        on_update(AgentToolResult(content=[text("50%")], details={"progress": 0.5}))
        await asyncio.sleep(0)
        on_update(AgentToolResult(content=[text("90%")]))
        return answer(params["value"])

    rec, _, _ = await run(
        done_only(assistant(call("tool-1", "echo", {"value": 5}), stop_reason="toolUse")),
        DONE,
        tools=[tool("echo", body)],
    )
    tool_lines = [line for line in rec.lines if line.startswith("tool_execution")]
    assert tool_lines == [
        'tool_execution_start tool-1 echo {"value":5}',
        'tool_execution_update tool-1 echo [{"type":"text","text":"50%"}]',
        'tool_execution_update tool-1 echo [{"type":"text","text":"90%"}]',
        'tool_execution_end tool-1 isError=false [{"type":"text","text":"echoed: 5"}]',
    ]
    update = next(e for e in rec.events if e["type"] == "tool_execution_update")
    assert update["args"] == {"value": 5}
    assert update["partialResult"]["details"] == {"progress": 0.5}


async def test_late_tool_updates_are_ignored__pi_0_73_1_emits_them() -> None:
    kept: list[ToolUpdateCallback] = []

    async def body(
        tool_call_id: str, params: Any, signal: Any, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        assert on_update is not None
        kept.append(on_update)
        on_update(AgentToolResult(content=[text("working")]))
        return answer(params["value"])

    rec, _, _ = await run(calls(("tool-1", "a")), DONE, tools=[tool("echo", body)])
    before = list(rec.lines)
    kept[0](AgentToolResult(content=[text("too late")]))
    await asyncio.sleep(0.01)
    assert rec.lines == before
    assert sum(1 for line in rec.lines if line.startswith("tool_execution_update")) == 1


async def test_async_sink_receives_updates_in_order_without_interleaving() -> None:
    seen: list[str] = []

    async def sink(event: AgentEvent) -> None:
        seen.append(f"in {event.type}")
        await asyncio.sleep(0.001)
        seen.append(f"out {event.type}")

    async def body(
        tool_call_id: str, params: Any, signal: Any, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        assert on_update is not None
        on_update(AgentToolResult(content=[text("1")]))
        on_update(AgentToolResult(content=[text("2")]))
        return answer(params["value"])

    async with ScriptedStream(calls(("tool-1", "a")), DONE) as script:
        await run_agent_loop(
            [user("go")],
            AgentContext(tools=[tool("echo", body)]),
            AgentLoopConfig(model=MODEL),
            sink,
            None,
            script,
        )
    for i in range(0, len(seen), 2):
        assert seen[i].startswith("in ") and seen[i + 1] == "out " + seen[i][3:]
    types_ = [s[3:] for s in seen[::2]]
    start = types_.index("tool_execution_start")
    assert types_[start : start + 4] == [
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_update",
        "tool_execution_end",
    ]


async def test_the_signal_reaches_stream_function_tools_and_hooks() -> None:
    controller = AbortController()
    seen: list[tuple[str, AbortSignal | None]] = []

    async def body(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: Any
    ) -> AgentToolResult:
        seen.append(("execute", signal))
        return answer(params["value"])

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal | None) -> None:
        seen.append(("before", signal))

    async def after(ctx: AfterToolCallContext, signal: AbortSignal | None) -> None:
        seen.append(("after", signal))

    async def transform(messages: list[AgentMessage], signal: AbortSignal | None) -> list[AgentMessage]:
        seen.append(("transform", signal))
        return messages

    config = AgentLoopConfig(
        model=MODEL,
        options=AgentOptions(before_tool_call=before, after_tool_call=after, transform_context=transform),
    )
    _, _, script = await run(
        calls(("tool-1", "a")), DONE, tools=[tool("echo", body)], config=config, signal=controller.signal
    )
    assert [name for name, _ in seen] == ["transform", "before", "execute", "after", "transform"]
    assert all(signal is controller.signal for _, signal in seen)
    assert all(options.signal is controller.signal for _, _, options in script.calls)


# --- the model call -----------------------------------------------------------------------------


async def test_stream_options_come_from_the_config() -> None:
    asked: list[str] = []

    async def get_api_key(provider: str) -> str:
        asked.append(provider)
        return "key-from-hook"

    def on_payload(payload: dict[str, Any], model: Model) -> None:
        return None

    stream = StreamOptions(
        api_key="fallback",
        reasoning="high",
        session_id="s-1",
        temperature=0.2,
        max_tokens=99,
        max_retries=3,
        max_retry_delay_ms=1500,
        timeout_ms=9000,
        headers={"x-test": "1"},
        on_payload=on_payload,
        cache_retention="long",
    )
    config = AgentLoopConfig(model=MODEL, options=AgentOptions(get_api_key=get_api_key, stream=stream))
    _, _, script = await run(DONE, config=config)
    options = script.calls[0][2]
    assert options is not stream and stream.api_key == "fallback"  # each call gets its own copy
    assert asked == ["openai"]
    assert options.api_key == "key-from-hook"
    assert (options.reasoning, options.session_id, options.temperature, options.max_tokens) == (
        "high",
        "s-1",
        0.2,
        99,
    )
    assert (options.max_retries, options.max_retry_delay_ms, options.timeout_ms) == (3, 1500, 9000)
    assert options.headers == {"x-test": "1"}
    assert options.on_payload is on_payload
    assert options.cache_retention == "long"


async def test_api_key_falls_back_to_the_config_when_the_hook_has_none() -> None:
    options = AgentOptions(get_api_key=lambda provider: None, stream=StreamOptions(api_key="fallback"))
    config = AgentLoopConfig(model=MODEL, options=options)
    _, _, script = await run(DONE, config=config)
    assert script.calls[0][2].api_key == "fallback"


async def test_the_model_sees_tools_and_system_prompt() -> None:
    rec = Recorder()
    async with ScriptedStream(DONE) as script:
        context = AgentContext(system_prompt="be brief", tools=[recording_tool([])])
        await run_agent_loop([user("go")], context, AgentLoopConfig(model=MODEL), rec.event, None, script)
    model, llm_context, _ = script.calls[0]
    assert model is MODEL
    assert llm_context.system_prompt == "be brief"
    assert llm_context.tools is not None
    assert [(t.name, t.parameters) for t in llm_context.tools] == [("echo", SCHEMA)]


async def test_events_before_start_are_ignored_and_updates_carry_a_copy() -> None:
    partials: list[Any] = []

    async def produce(stream: AssistantMessageEventStream, options: StreamOptions) -> None:
        early = assistant(text("x"))
        stream.push(TextDeltaEvent(content_index=0, delta="x", partial=early))
        partial = assistant(text(""))
        stream.push(StartEvent(partial=partial))
        partial.content[0].text = "hi"  # type: ignore[union-attr]
        partials.append(partial)
        stream.push(TextDeltaEvent(content_index=0, delta="hi", partial=partial))
        stream.push(DoneEvent(reason="stop", message=assistant(text("hi"))))

    seen: list[AgentEvent] = []
    async with ScriptedStream(produce) as script:
        await run_agent_loop(
            [user("go")], AgentContext(), AgentLoopConfig(model=MODEL), seen.append, None, script
        )
    kinds = [e.type for e in seen]
    assert kinds == ["agent_start", "turn_start", "message_start", "message_end", "message_start",
                     "message_update", "message_end", "turn_end", "agent_end"]  # fmt: skip
    update = seen[5]
    assert update.type == "message_update"
    assert update.message is not partials[0]
    assert update.message == partials[0]
    assert update.assistant_message_event.type == "text_delta"


async def test_a_stream_function_may_return_an_awaitable() -> None:
    async def stream_fn(
        model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        stream = AssistantMessageEventStream()
        stream.push(DoneEvent(reason="stop", message=assistant(text("async"))))
        return stream

    result = await run_agent_loop(
        [user("go")], AgentContext(), AgentLoopConfig(model=MODEL), lambda e: None, None, stream_fn
    )
    assert render(result[-1]) == "assistant[stop]:text(async)"


async def test_without_a_stream_function_the_loop_uses_providers_stream_simple(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    used: list[Model] = []

    def stream_simple(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        used.append(model)
        stream = AssistantMessageEventStream()
        stream.push(DoneEvent(reason="stop", message=assistant(text("from providers"))))
        return stream

    fake = types.ModuleType("agent_core.providers")
    fake.stream_simple = stream_simple  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agent_core.providers", fake)
    result = await run_agent_loop([user("go")], AgentContext(), AgentLoopConfig(model=MODEL), lambda e: None)
    assert used == [MODEL]
    assert render(result[-1]) == "assistant[stop]:text(from providers)"


async def test_transform_and_convert_may_be_sync_or_async_and_only_shape_the_model_view() -> None:
    async def convert(messages: list[AgentMessage]) -> list[Any]:
        return [m for m in messages if m.role != "note"]

    note = CustomMessage(role="note", text="internal")
    rec = Recorder()
    async with ScriptedStream(DONE) as script:
        context = AgentContext(messages=[note])
        result = await run_agent_loop(
            [user("go")],
            context,
            AgentLoopConfig(model=MODEL, options=AgentOptions(convert_to_llm=convert)),
            rec.event,
            None,
            script,
        )
    assert [m.role for m in script.calls[0][1].messages] == ["user"]
    assert [m.role for m in result] == ["user", "assistant"]
    assert context.messages == [note]


# --- steering, follow-ups and stopping --------------------------------------------------------


async def test_steering_is_injected_after_all_tool_calls_complete() -> None:
    executed: list[Any] = []
    delivered = False

    async def steering() -> list[AgentMessage]:
        nonlocal delivered
        if executed and not delivered:
            delivered = True
            return [user("interrupt")]
        return []

    config = AgentLoopConfig(
        model=MODEL, options=AgentOptions(tool_execution="sequential"), get_steering_messages=steering
    )
    rec, _, script = await run(
        calls(("tool-1", "first"), ("tool-2", "second")),
        DONE,
        tools=[recording_tool(executed)],
        config=config,
    )
    assert executed == ["first", "second"]
    assert [e[1] for e in ends(rec)] == [False, False]
    starts = [line for line in rec.lines if line.startswith("message_start") and "assistant" not in line]
    assert starts[-1] == "message_start user:interrupt"
    assert render(script.calls[1][1].messages[-1]) == "user:interrupt"


async def test_should_stop_after_turn_skips_the_polls() -> None:
    polls = {"steering": 0, "follow_up": 0}

    async def steering() -> list[AgentMessage]:
        polls["steering"] += 1
        return []

    async def follow_ups() -> list[AgentMessage]:
        polls["follow_up"] += 1
        return [user("more")]

    config = AgentLoopConfig(
        model=MODEL,
        get_steering_messages=steering,
        get_follow_up_messages=follow_ups,
        options=AgentOptions(should_stop_after_turn=lambda ctx: True),
    )
    rec, result, script = await run(calls(("tool-1", "a")), tools=[recording_tool([])], config=config)
    assert polls == {"steering": 1, "follow_up": 0}
    assert len(script.calls) == 1
    assert rec.types == [
        "agent_start", "turn_start", "message_start", "message_end", "message_start", "message_end",
        "tool_execution_start", "tool_execution_end", "message_start", "message_end", "turn_end", "agent_end",
    ]  # fmt: skip
    assert [m.role for m in result] == ["user", "assistant", "toolResult"]


async def test_follow_ups_start_a_new_turn_after_the_agent_would_stop() -> None:
    queue: list[list[AgentMessage]] = [[user("f1"), user("f2")]]

    async def follow_ups() -> list[AgentMessage]:
        return queue.pop(0) if queue else []

    rec, result, _ = await run(
        DONE, DONE, config=AgentLoopConfig(model=MODEL, get_follow_up_messages=follow_ups)
    )
    assert rec.types.count("turn_start") == 2
    assert [render(m) for m in result] == [
        "user:go",
        "assistant[stop]:text(done)",
        "user:f1",
        "user:f2",
        "assistant[stop]:text(done)",
    ]


async def test_an_error_response_ends_the_run_without_polling() -> None:
    polled: list[str] = []

    async def follow_ups() -> list[AgentMessage]:
        polled.append("follow_up")
        return [user("never")]

    config = AgentLoopConfig(model=MODEL, get_follow_up_messages=follow_ups)
    rec, result, _ = await run(text_reply("oops", stop_reason="error", error_message="boom"), config=config)
    assert polled == []
    assert rec.types[-2:] == ["turn_end", "agent_end"]
    assert render(result[-1]) == "assistant[error:boom]:text(oops)"


# --- continue -----------------------------------------------------------------------------------


async def test_continue_from_a_user_message_emits_only_the_new_assistant() -> None:
    rec = Recorder()
    async with ScriptedStream(DONE) as script:
        result = await run_agent_loop_continue(
            AgentContext(messages=[user("hello")]), AgentLoopConfig(model=MODEL), rec.event, None, script
        )
    assert [m.role for m in result] == ["assistant"]
    assert [line for line in rec.lines if line.startswith("message_end")] == [
        "message_end assistant[stop]:text(done)"
    ]


async def test_continue_from_a_custom_role_is_allowed() -> None:
    def convert(messages: list[AgentMessage]) -> list[Any]:
        return [UserMessage(content="from custom") if m.role == "custom" else m for m in messages]

    async with ScriptedStream(DONE) as script:
        result = await run_agent_loop_continue(
            AgentContext(messages=[CustomMessage(role="custom", text="x")]),
            AgentLoopConfig(model=MODEL, options=AgentOptions(convert_to_llm=convert)),
            lambda e: None,
            None,
            script,
        )
    assert len(result) == 1
    assert render(script.calls[0][1].messages[0]) == "user:from custom"


@pytest.mark.parametrize(
    ("messages", "text_"),
    [
        ([], "Cannot continue: no messages in context"),
        ([assistant(text("b"))], "Cannot continue from message role: assistant"),
    ],
)
async def test_run_continue_rejects_bad_input(messages: list[AgentMessage], text_: str) -> None:
    with pytest.raises(ContinueError, match=text_):
        await run_agent_loop_continue(
            AgentContext(messages=messages), AgentLoopConfig(model=MODEL), lambda e: None
        )


async def test_a_sink_raising_mid_stream_stops_the_model_stream_before_the_loop_raises() -> None:
    streams: list[AssistantMessageEventStream] = []
    outcome: list[str] = []

    async def endless(stream: AssistantMessageEventStream) -> None:
        stream.push(StartEvent(partial=assistant(text(""))))
        try:
            while True:
                await asyncio.sleep(0)
                stream.push(TextDeltaEvent(content_index=0, delta="x", partial=assistant(text("x"))))
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    def stream_fn(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        stream = AssistantMessageEventStream()
        stream.start(endless(stream))
        streams.append(stream)
        return stream

    def sink(event: AgentEvent) -> None:
        if event.type == "message_update":
            raise RuntimeError("sink broke")

    with pytest.raises(RuntimeError, match="sink broke"):
        await run_agent_loop(
            [user("go")], AgentContext(), AgentLoopConfig(model=MODEL), sink, None, stream_fn
        )
    assert outcome == ["cancelled"]
    assert not streams[0].producing


# --- the EventStream entry points ---------------------------------------------------------------


async def test_agent_loop_yields_the_same_events_and_result_as_the_sink() -> None:
    async with ScriptedStream(text_reply("a", "b")) as script:
        stream = agent_loop([user("go")], AgentContext(), AgentLoopConfig(model=MODEL), None, script)
        seen = [event.type async for event in stream]
        result = await stream.result()
    assert seen[0] == "agent_start" and seen[-1] == "agent_end"
    assert [render(m) for m in result] == ["user:go", "assistant[stop]:text(ab)"]


async def test_agent_loop_raises_to_consumer_when_loop_fails__pi_hangs() -> None:
    def convert(messages: list[AgentMessage]) -> list[Any]:
        raise ValueError("convert failed")

    stream = agent_loop(
        [user("go")],
        AgentContext(),
        AgentLoopConfig(model=MODEL, options=AgentOptions(convert_to_llm=convert)),
        None,
        ScriptedStream(),
    )
    seen: list[str] = []
    with pytest.raises(ValueError, match="convert failed"):
        async with asyncio.timeout(2):
            async for event in stream:
                seen.append(event.type)
    assert seen == ["agent_start", "turn_start", "message_start", "message_end"]
    with pytest.raises(ValueError, match="convert failed"):
        await stream.result()


async def test_agent_loop_continue_rejects_synchronously() -> None:
    with pytest.raises(ContinueError, match="no messages"):
        agent_loop_continue(AgentContext(), AgentLoopConfig(model=MODEL))


async def test_closing_the_stream_cancels_the_loop_and_its_running_tools() -> None:
    started = asyncio.Event()
    cancelled: list[str] = []

    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(tool_call_id)
            raise
        return answer(params["value"])

    async with ScriptedStream(calls(("tool-1", "a"), ("tool-2", "b"))) as script:
        stream = agent_loop(
            [user("go")], AgentContext(tools=[tool("echo", body)]), AgentLoopConfig(model=MODEL), None, script
        )
        async with stream:
            await started.wait()
        assert sorted(cancelled) == ["tool-1", "tool-2"]
        with pytest.raises(AgentCoreError, match="cancelled"):
            await stream.result()
        await stream.aclose()  # idempotent


async def test_closing_the_stream_before_the_loop_ran_ends_it_cleanly() -> None:
    script = ScriptedStream()
    stream = agent_loop([user("go")], AgentContext(), AgentLoopConfig(model=MODEL), None, script)
    await stream.aclose()  # the loop coroutine never ran: it is closed, not left un-awaited
    with pytest.raises(AgentCoreError, match="cancelled"):
        await stream.result()
    del stream
    gc.collect()  # an un-awaited coroutine would warn here, failing the test
    assert script.calls == []


async def test_abandoning_the_iteration_stops_the_loop() -> None:
    cancelled = asyncio.Event()

    async def body(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return answer(params["value"])

    async with ScriptedStream(calls(("tool-1", "a"))) as script:
        stream = agent_loop(
            [user("go")], AgentContext(tools=[tool("echo", body)]), AgentLoopConfig(model=MODEL), None, script
        )
        async for event in stream:
            if event.type == "tool_execution_start":
                break
        async with asyncio.timeout(5):
            await cancelled.wait()
        with pytest.raises(AgentCoreError, match="cancelled"):
            await stream.result()


async def test_a_slow_async_sink_back_pressures_the_loop() -> None:
    release = asyncio.Event()
    seen: list[str] = []

    async def sink(event: AgentEvent) -> None:
        seen.append(event.type)
        if event.type == "message_end" and len(seen) == 4:
            await release.wait()

    async with ScriptedStream(DONE) as script:
        task = asyncio.ensure_future(
            run_agent_loop([user("go")], AgentContext(), AgentLoopConfig(model=MODEL), sink, None, script)
        )
        await asyncio.sleep(0.02)
        assert seen == ["agent_start", "turn_start", "message_start", "message_end"]
        assert script.calls == []
        release.set()
        await task
    assert seen[-1] == "agent_end"


async def test_refreshed_tools_apply_from_the_next_turn() -> None:
    """A host whose tool list changed mid-run (`refresh_tools`) gives the model and the executor
    the new list from the next turn; the first turn keeps the run's tools."""
    executed: list[Any] = []
    asked = 0

    def refresh() -> list[AgentTool] | None:
        nonlocal asked
        asked += 1
        return [recording_tool(executed), recording_tool(executed, name="late")] if asked == 1 else None

    config = AgentLoopConfig(model=MODEL, options=AgentOptions(refresh_tools=refresh))
    _, result, script = await run(
        calls(("tool-1", "first")),
        calls(("tool-2", "second"), name="late"),
        DONE,
        tools=[recording_tool(executed)],
        config=config,
    )
    assert executed == ["first", "second"]
    assert asked == 2  # before the second and the third turn
    offered = [[t.name for t in (ctx.tools or [])] for _, ctx, _ in script.calls]
    assert offered == [["echo"], ["echo", "late"], ["echo", "late"]]
    assert not any(m.role == "toolResult" and m.is_error for m in result)
