"""Conformance with the traces recorded from pi-agent-core 0.73.1 (tests/agent_core/traces/).

Every scenario file is set up again here: a scripted stream function reproducing the recorded
deltas, tools with the described timing, the hooks and the steer/follow-up/abort calls at the
described moments. The run is logged in the same compact notation (markers included) and must
equal the recorded `compact` list; the full event objects (timestamps normalised), the loop's
result, the Agent's state and the scenario's other recorded facts must be equal too.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agent_core import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentContext,
    AgentEvent,
    AgentLoopConfig,
    AgentMessage,
    AgentOptions,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    AssistantMessageEvent,
    ContinueError,
    CustomMessage,
    DoneEvent,
    Model,
    ShouldStopAfterTurnContext,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCall,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolResultMessage,
    ToolUpdateCallback,
    Usage,
    agent_loop,
    agent_loop_continue,
    default_convert_to_llm,
    run_agent_loop,
)
from tests.agent_core._compact import Recorder, normalise, render
from tests.agent_core._scripted import (
    MODEL,
    Producer,
    ScriptedStream,
    assistant,
    call,
    done_only,
    events,
    streamed,
    text,
    text_reply,
    thinking,
    until_aborted,
    user,
)

TRACES = Path(__file__).parent / "traces"
METADATA = {"scenario", "description", "package", "api"}

ECHO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"value": {"type": "string"}},
    "required": ["value"],
}


@dataclass
class Outcome:
    """What a scenario produced, keyed like the recorded file."""

    recorder: Recorder
    facts: dict[str, Any] = field(default_factory=dict)


Scenario = Callable[[], Awaitable[Outcome]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(number: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[number] = fn
        return fn

    return register


Work = Callable[[str, AbortSignal | None], Awaitable[None]]


async def _no_work(tool_call_id: str, signal: AbortSignal | None) -> None:
    return None


def echo_tool(
    rec: Recorder,
    *,
    name: str = "echo",
    work: Work = _no_work,
    terminate: bool | None = None,
    execution_mode: Any = None,
    log_end: bool = True,
) -> AgentTool:
    """The traces' echo tool: logs its body and answers `echoed: <value>`."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        rec.marker("exec_begin", {"toolCallId": tool_call_id, "params": params})
        await work(tool_call_id, signal)
        if log_end:
            rec.marker("exec_end", {"toolCallId": tool_call_id, "aborted": bool(signal and signal.aborted)})
        value = params["value"]
        return AgentToolResult(
            content=[text(f"echoed: {value}")], details={"value": value}, terminate=terminate
        )

    return AgentTool(
        name=name,
        label=name,
        description=f"{name} the value",
        parameters=ECHO_SCHEMA,
        execute=execute,
        execution_mode=execution_mode,
    )


def rendered(messages: list[AgentMessage]) -> list[str]:
    return [render(m) for m in messages]


def agent_state(agent: Agent) -> dict[str, Any]:
    state = agent.state
    out: dict[str, Any] = {
        "systemPrompt": state.system_prompt,
        "thinkingLevel": state.thinking_level,
        "messages": rendered(state.messages),
        "isStreaming": state.is_streaming,
        "pendingToolCalls": sorted(state.pending_tool_calls),
        "hasQueuedMessages": agent.has_queued_messages(),
    }
    if state.streaming_message is not None:
        out["streamingMessage"] = render(state.streaming_message)
    if state.error_message is not None:
        out["errorMessage"] = state.error_message
    return out


async def run_loop(
    rec: Recorder,
    *responses: Producer,
    prompt: str = "go",
    context: AgentContext | None = None,
    config: AgentLoopConfig | None = None,
) -> Outcome:
    """Run `run_agent_loop` for one user prompt with a scripted model, recording everything."""
    async with ScriptedStream(*responses, on_call=rec.llm_call) as script:
        result = await run_agent_loop(
            [user(prompt)],
            context or AgentContext(),
            config or AgentLoopConfig(model=MODEL),
            rec.event,
            stream_fn=script,
        )
    return Outcome(rec, {"result": rendered(result), "llmCalls": len(script.calls)})


def tool_use(*calls: ToolCall, stop_reason: str = "toolUse") -> AssistantMessage:
    return assistant(*calls, stop_reason=stop_reason)


def streamed_tool_call(call_id: str, name: str, steps: list[tuple[str, dict[str, Any]]]) -> Producer:
    final = tool_use(call(call_id, name, steps[-1][1]))
    return streamed(final, lambda p: p.tool_call(call_id, name, steps))


# --- agentLoop / runAgentLoop scenarios --------------------------------------------------------


@scenario("00")
async def stream_equivalence() -> Outcome:
    def scripts() -> dict[str, tuple[list[Producer], list[AgentTool]]]:
        rec = Recorder()
        hello = [('{"value":', {}), ('"hello"}', {"value": "hello"})]
        pair = tool_use(call("tool-1", "echo", {"value": "a"}), call("tool-2", "echo", {"value": "b"}))
        return {
            "text": ([text_reply("Hi th", "ere!")], []),
            "tool": (
                [streamed_tool_call("tool-1", "echo", hello), text_reply("do", "ne")],
                [echo_tool(rec)],
            ),
            "parallel": ([done_only(pair), done_only(assistant(text("done")))], [echo_tool(rec)]),
        }

    custom: dict[str, Any] = {}
    for name in ("text", "tool", "parallel"):
        responses, tools = scripts()[name]
        sink = Recorder()
        async with ScriptedStream(*responses) as script:
            context = AgentContext(tools=tools)
            sink_result = await run_agent_loop(
                [user("go")], context, AgentLoopConfig(model=MODEL), sink.event, stream_fn=script
            )
        responses, tools = scripts()[name]
        streamed_types: list[str] = []
        async with ScriptedStream(*responses) as script:
            stream = agent_loop(
                [user("go")], AgentContext(tools=tools), AgentLoopConfig(model=MODEL), None, script
            )
            async with stream:
                async for event in stream:
                    streamed_types.append(event.type)
                stream_result = await stream.result()
        custom[name] = {
            "sinkTypes": sink.types,
            "streamTypes": streamed_types,
            "same": sink.types == streamed_types,
            "sameResult": rendered(sink_result) == rendered(stream_result),
        }
    return Outcome(Recorder(), {"custom": custom})


@scenario("01")
async def simple_text_reply() -> Outcome:
    rec = Recorder()
    return await run_loop(
        rec,
        text_reply("Hi th", "ere!"),
        prompt="Hello",
        context=AgentContext(system_prompt="You are helpful."),
    )


@scenario("02")
async def text_done_only() -> Outcome:
    return await run_loop(Recorder(), done_only(assistant(text("Hi there!"))), prompt="Hello")


@scenario("03")
async def one_tool_call_then_text() -> Outcome:
    rec = Recorder()
    steps = [('{"value":', {}), ('"hello"}', {"value": "hello"})]
    return await run_loop(
        rec,
        streamed_tool_call("tool-1", "echo", steps),
        text_reply("do", "ne"),
        prompt="echo something",
        context=AgentContext(tools=[echo_tool(rec)]),
    )


async def _slow_first(tool_call_id: str, signal: AbortSignal | None) -> None:
    if tool_call_id == "tool-1":
        await asyncio.sleep(0.03)


def _first_and_second() -> Producer:
    return done_only(
        tool_use(call("tool-1", "echo", {"value": "first"}), call("tool-2", "echo", {"value": "second"}))
    )


@scenario("04")
async def two_parallel_tool_calls() -> Outcome:
    rec = Recorder()
    return await run_loop(
        rec,
        _first_and_second(),
        done_only(assistant(text("done"))),
        prompt="echo both",
        context=AgentContext(tools=[echo_tool(rec, work=_slow_first)]),
    )


@scenario("05")
async def two_sequential_tool_calls() -> Outcome:
    rec = Recorder()
    return await run_loop(
        rec,
        _first_and_second(),
        done_only(assistant(text("done"))),
        prompt="echo both",
        context=AgentContext(tools=[echo_tool(rec, work=_slow_first)]),
        config=AgentLoopConfig(model=MODEL, options=AgentOptions(tool_execution="sequential")),
    )


@scenario("08")
async def error_response() -> Outcome:
    reply = text_reply(
        "part", "ial", stop_reason="error", error_message="Provider finish_reason: content_filter"
    )
    return await run_loop(Recorder(), reply, prompt="hi")


@scenario("09")
async def tool_not_found_and_validation_error() -> Outcome:
    rec = Recorder()
    calls = tool_use(
        call("t-missing", "nope", {}),
        call("t-invalid", "echo", {"wrong": 1}),
        call("t-coerced", "echo", {"value": 42}),
    )
    return await run_loop(
        rec, done_only(calls), done_only(assistant(text("ok"))), context=AgentContext(tools=[echo_tool(rec)])
    )


def _counting_poll(rec: Recorder, name: str) -> Callable[[], Awaitable[list[AgentMessage]]]:
    count = 0

    async def poll() -> list[AgentMessage]:
        nonlocal count
        count += 1
        rec.marker(name, {"n": count})
        return []

    return poll


@scenario("12")
async def terminate_all() -> Outcome:
    rec = Recorder()
    config = AgentLoopConfig(
        model=MODEL,
        get_steering_messages=_counting_poll(rec, "poll_steering"),
        get_follow_up_messages=_counting_poll(rec, "poll_followup"),
    )
    pair = tool_use(call("tool-1", "echo", {"value": "a"}), call("tool-2", "echo", {"value": "b"}))
    return await run_loop(
        rec, done_only(pair), context=AgentContext(tools=[echo_tool(rec, terminate=True)]), config=config
    )


@scenario("14")
async def should_stop_after_turn() -> Outcome:
    rec = Recorder()

    async def steering() -> list[AgentMessage]:
        rec.marker("poll_steering")
        return []

    async def follow_ups() -> list[AgentMessage]:
        rec.marker("poll_followup")
        return [user("never delivered")]

    def stop(ctx: ShouldStopAfterTurnContext) -> bool:
        rec.marker(
            "shouldStopAfterTurn",
            {
                "message": render(ctx.message),
                "toolResults": [r.tool_call_id for r in ctx.tool_results],
                "contextRoles": [m.role for m in ctx.context.messages],
                "newMessages": [m.role for m in ctx.new_messages],
            },
        )
        return True

    config = AgentLoopConfig(
        model=MODEL,
        get_steering_messages=steering,
        get_follow_up_messages=follow_ups,
        options=AgentOptions(should_stop_after_turn=stop),
    )
    return await run_loop(
        rec,
        done_only(tool_use(call("tool-1", "echo", {"value": "a"}))),
        context=AgentContext(tools=[echo_tool(rec)]),
        config=config,
    )


@scenario("25")
async def prepare_arguments() -> Outcome:
    rec = Recorder()

    def legacy_to_edits(raw: Any) -> Any:
        if isinstance(raw, dict) and "oldText" in raw:
            return {"edits": [{"oldText": raw["oldText"], "newText": raw["newText"]}]}
        return raw

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        rec.marker("exec_begin", {"toolCallId": tool_call_id, "params": params})
        return AgentToolResult(content=[text(f"edited {len(params['edits'])}")], details={})

    edit = AgentTool(
        name="edit",
        label="edit",
        description="replace text",
        parameters={
            "type": "object",
            "properties": {
                "edits": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                        "required": ["oldText", "newText"],
                    },
                }
            },
            "required": ["edits"],
        },
        execute=execute,
        prepare_arguments=legacy_to_edits,
    )
    return await run_loop(
        rec,
        done_only(tool_use(call("e1", "edit", {"oldText": "a", "newText": "b"}))),
        done_only(assistant(text("done"))),
        prompt="edit",
        context=AgentContext(tools=[edit]),
    )


@scenario("26")
async def transform_and_convert() -> Outcome:
    rec = Recorder()

    async def transform(messages: list[AgentMessage], signal: AbortSignal | None) -> list[AgentMessage]:
        rec.marker("transformContext", {"in": [m.role for m in messages]})
        return messages[-2:]

    def convert(messages: list[AgentMessage]) -> Any:
        rec.marker("convertToLlm", {"in": [m.role for m in messages]})
        return default_convert_to_llm(messages)

    history: list[AgentMessage] = [
        user("old question"),
        assistant(text("old answer")),
        CustomMessage(role="notification", text="build finished"),
    ]
    config = AgentLoopConfig(
        model=MODEL, options=AgentOptions(transform_context=transform, convert_to_llm=convert)
    )
    outcome = await run_loop(
        rec,
        done_only(assistant(text("r"))),
        prompt="new",
        context=AgentContext(system_prompt="sys", messages=history),
        config=config,
    )
    assert [m.role for m in history] == ["user", "assistant", "notification"]  # the caller's list is kept
    return outcome


@scenario("27")
async def length_stop_with_toolcall() -> Outcome:
    rec = Recorder()
    return await run_loop(
        rec,
        done_only(tool_use(call("tool-1", "echo", {"value": "hel"}), stop_reason="length")),
        done_only(assistant(text("done"))),
        context=AgentContext(tools=[echo_tool(rec)]),
    )


@scenario("28")
async def sequential_forced_by_tool_execution_mode() -> Outcome:
    rec = Recorder()
    pair = tool_use(call("tool-1", "echo", {"value": "first"}), call("tool-2", "slow", {"value": "second"}))
    tools = [echo_tool(rec), echo_tool(rec, name="slow", work=_slow_first, execution_mode="sequential")]
    return await run_loop(
        rec, done_only(pair), done_only(assistant(text("done"))), context=AgentContext(tools=tools)
    )


# --- Agent scenarios ---------------------------------------------------------------------------


async def run_agent(rec: Recorder, agent: Agent, prompt: str, script: ScriptedStream) -> dict[str, Any]:
    agent.subscribe(rec.listener)
    async with script:
        await agent.prompt(prompt)
    return {"state": agent_state(agent), "llmCalls": len(script.calls)}


def _steering_tools(rec: Recorder, agent_ref: list[Agent]) -> AgentTool:
    gate = asyncio.Event()

    async def work(tool_call_id: str, signal: AbortSignal | None) -> None:
        if tool_call_id == "tool-1":
            agent_ref[0].steer(user("interrupt"))
            rec.marker("steer_queued", {"during": "tool-1"})
            asyncio.get_running_loop().call_later(0.01, gate.set)
        await gate.wait()

    return echo_tool(rec, work=work)


async def _steering_during_first_tool(mode: Any) -> Outcome:
    rec = Recorder()
    agent_ref: list[Agent] = []
    script = ScriptedStream(_first_and_second(), done_only(assistant(text("done"))), on_call=rec.llm_call)
    agent = Agent(
        initial_state={"model": MODEL, "tools": [_steering_tools(rec, agent_ref)]},
        stream_fn=script,
        options=AgentOptions(tool_execution=mode),
    )
    agent_ref.append(agent)
    return Outcome(rec, await run_agent(rec, agent, "start", script))


@scenario("06")
async def steering_during_first_tool_sequential() -> Outcome:
    return await _steering_during_first_tool("sequential")


@scenario("07")
async def steering_during_first_tool_parallel() -> Outcome:
    return await _steering_during_first_tool("parallel")


async def _queued_twice(queue: str, marker: str) -> Outcome:
    rec = Recorder()
    agent = Agent(initial_state={"model": MODEL})

    def on_call(number: int, model: Model, context: Any, options: Any) -> None:
        rec.llm_call(number, model, context, options)
        if number == 1:
            enqueue = agent.steer if queue == "steer" else agent.follow_up
            enqueue(user(f"{queue[0]}1"))
            enqueue(user(f"{queue[0]}2"))
            rec.marker(marker)

    script = ScriptedStream(*(done_only(assistant(text(f"r{i}"))) for i in (1, 2, 3)), on_call=on_call)
    agent.stream_fn = script
    return Outcome(rec, await run_agent(rec, agent, "start", script))


@scenario("16")
async def steering_one_at_a_time() -> Outcome:
    return await _queued_twice("steer", "steer_queued_x2_during_llm_call_1")


@scenario("18")
async def followup_one_at_a_time() -> Outcome:
    return await _queued_twice("follow", "followUp_queued_x2_during_llm_call_1")


@scenario("20")
async def agent_abort_during_stream() -> Outcome:
    rec = Recorder()
    script = ScriptedStream(until_aborted(), on_call=rec.llm_call)
    agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
    during: dict[str, Any] = {}

    def abort_when_streaming(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_start" and event.message.role == "assistant":
            during.update(agent_state(agent))
            agent.abort()
            rec.marker("abort_called")

    agent.subscribe(rec.listener)
    agent.subscribe(abort_when_streaming)
    async with script:
        await agent.prompt("hello")
    return Outcome(
        rec, {"state": agent_state(agent), "stateDuringStream": during, "llmCalls": len(script.calls)}
    )


@scenario("21")
async def agent_abort_during_tool() -> Outcome:
    rec = Recorder()
    agent_ref: list[Agent] = []

    async def work(tool_call_id: str, signal: AbortSignal | None) -> None:
        agent_ref[0].abort()
        rec.marker("abort_called_inside_tool", {"signalAborted": bool(signal and signal.aborted)})

    script = ScriptedStream(
        done_only(tool_use(call("tool-1", "echo", {"value": "a"}))), until_aborted(), on_call=rec.llm_call
    )
    agent = Agent(initial_state={"model": MODEL, "tools": [echo_tool(rec, work=work)]}, stream_fn=script)
    agent_ref.append(agent)
    return Outcome(rec, await run_agent(rec, agent, "go", script))


@scenario("22")
async def agent_stream_fn_throws() -> Outcome:
    rec = Recorder()

    def exploding(model: Model, context: Any, options: Any) -> Any:
        rec.marker("streamFn_throwing")
        raise RuntimeError("provider exploded")

    agent = Agent(initial_state={"model": MODEL}, stream_fn=exploding)
    agent.subscribe(rec.listener)
    rejected: str | None = None
    try:
        await agent.prompt("hello")
    except Exception as exc:
        rejected = str(exc)
    last = normalise(agent.state.messages[-1].dump())
    return Outcome(rec, {"state": agent_state(agent), "promptRejected": rejected, "lastMessage": last})


@scenario("23")
async def continue_rules() -> Outcome:
    custom: dict[str, Any] = {}
    config = AgentLoopConfig(model=MODEL)
    with pytest.raises(ContinueError) as empty:
        agent_loop_continue(AgentContext(messages=[]), config)
    custom["loopContinueEmpty"] = str(empty.value)
    with pytest.raises(ContinueError) as tail:
        agent_loop_continue(AgentContext(messages=[user("a"), assistant(text("b"))]), config)
    custom["loopContinueAssistantTail"] = str(tail.value)
    custom["loopContinueFromToolResult"] = await _loop_continue_from_tool_result()

    with pytest.raises(ContinueError) as agent_empty:
        await Agent().continue_()
    custom["agentContinueEmpty"] = str(agent_empty.value)
    with pytest.raises(ContinueError) as agent_tail:
        await Agent(initial_state={"messages": [user("a"), assistant(text("b"))]}).continue_()
    custom["agentContinueAssistantTail"] = str(agent_tail.value)
    custom["agentContinueAssistantTailWithTwoSteers"] = await _continue_with_two_steers()
    custom["promptWhileStreaming"], custom["continueWhileStreaming"] = await _busy_texts()
    return Outcome(Recorder(), {"custom": custom})


async def _loop_continue_from_tool_result() -> dict[str, Any]:
    rec = Recorder()
    llm: list[dict[str, Any]] = []

    def on_call(number: int, model: Model, context: Any, options: Any) -> None:
        llm.append(
            {
                "kind": "llm_call",
                "call": number,
                "systemPrompt": context.system_prompt,
                "messages": rendered(context.messages),
                "tools": [t.name for t in context.tools or []],
                "options": {"hasSignal": options.signal is not None},
            }
        )

    transcript: list[AgentMessage] = [
        user("go"),
        tool_use(call("tool-1", "echo", {"value": "a"})),
        ToolResultMessage(
            tool_call_id="tool-1", tool_name="echo", content=[text("echoed: a")], details={"value": "a"}
        ),
    ]
    async with ScriptedStream(done_only(assistant(text("final"))), on_call=on_call) as script:
        stream = agent_loop_continue(
            AgentContext(messages=transcript, tools=[]), AgentLoopConfig(model=MODEL), None, script
        )
        async for event in stream:
            rec.event(event)
        result = await stream.result()
    return {"events": rec.lines, "result": rendered(result), "llm": llm}


async def _continue_with_two_steers() -> dict[str, Any]:
    rec = Recorder()
    script = ScriptedStream(
        done_only(assistant(text("r1"))), done_only(assistant(text("r2"))), on_call=rec.llm_call
    )
    agent = Agent(
        initial_state={"model": MODEL, "messages": [user("a"), assistant(text("b"))]}, stream_fn=script
    )
    agent.steer(user("s1"))
    agent.steer(user("s2"))
    agent.subscribe(rec.listener)
    async with script:
        await agent.continue_()
    return {"log": rec.lines, "state": agent_state(agent)}


async def _busy_texts() -> tuple[str, str]:
    script = ScriptedStream(until_aborted())
    agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
    streaming = asyncio.Event()

    def watch(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_start" and event.message.role == "assistant":
            streaming.set()

    agent.subscribe(watch)
    async with script:
        run = asyncio.ensure_future(agent.prompt("first"))
        await streaming.wait()
        with pytest.raises(AgentBusyError) as prompt_busy:
            await agent.prompt("second")
        with pytest.raises(AgentBusyError) as continue_busy:
            await agent.continue_()
        agent.abort()
        await run
    return str(prompt_busy.value), str(continue_busy.value)


# --- Agent + a faux-style provider ---------------------------------------------------------------

FAUX = Model(id="faux-1", name="faux-1", api="faux:1795653467613:xezl19b1kg", provider="faux")


def _chunks(value: str, size: int = 4) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)]


def faux_reply(final: AssistantMessage) -> Producer:
    """What pi's faux provider (4-character chunks) pushed for `final`.

    That provider fills its shared partial ahead of the loop reading the queued events, so each
    recorded update shows the blocks up to its own already complete, and `start` shows none.
    """

    def build() -> list[AssistantMessageEvent]:
        def upto(index: int) -> AssistantMessage:
            return copy.deepcopy(msgspec.structs.replace(final, content=final.content[: index + 1]))

        out: list[AssistantMessageEvent] = [StartEvent(partial=msgspec.structs.replace(final, content=[]))]
        for index, block in enumerate(final.content):
            if block.type == "thinking":
                out.append(ThinkingStartEvent(content_index=index, partial=upto(index)))
                for piece in _chunks(block.thinking):
                    out.append(ThinkingDeltaEvent(content_index=index, delta=piece, partial=upto(index)))
                out.append(ThinkingEndEvent(content_index=index, content=block.thinking, partial=upto(index)))
            elif block.type == "text":
                out.append(TextStartEvent(content_index=index, partial=upto(index)))
                for piece in _chunks(block.text):
                    out.append(TextDeltaEvent(content_index=index, delta=piece, partial=upto(index)))
                out.append(TextEndEvent(content_index=index, content=block.text, partial=upto(index)))
            else:
                out.append(ToolCallStartEvent(content_index=index, partial=upto(index)))
                for piece in _chunks(json.dumps(block.arguments, separators=(",", ":"))):
                    out.append(ToolCallDeltaEvent(content_index=index, delta=piece, partial=upto(index)))
                out.append(ToolCallEndEvent(content_index=index, tool_call=block, partial=upto(index)))
        out.append(DoneEvent(reason=final.stop_reason, message=final))
        return out

    return events(build)


@scenario("29")
async def faux_provider_agent() -> Outcome:
    rec = Recorder()
    first = assistant(
        thinking("think!"),
        text("Calling tool"),
        call("call-1", "echo", {"value": "hi"}),
        stop_reason="toolUse",
        model=FAUX,
        usage=Usage(input=46, output=10, total_tokens=56),
    )
    second = assistant(text("All done."), model=FAUX, usage=Usage(input=65, output=3, total_tokens=68))
    script = ScriptedStream(faux_reply(first), faux_reply(second))
    agent = Agent(
        initial_state={"system_prompt": "sys", "model": FAUX, "tools": [echo_tool(rec)]}, stream_fn=script
    )
    facts = await run_agent(rec, agent, "hello", script)
    del facts["llmCalls"]
    usages = [m.usage.dump() for m in agent.state.messages if isinstance(m, AssistantMessage)]
    return Outcome(rec, {**facts, "usages": usages})


# --- the comparison ------------------------------------------------------------------------------


def _trace_files() -> list[Path]:
    return sorted(TRACES.glob("[0-9][0-9]_*.json"))


def test_every_recorded_scenario_has_a_setup() -> None:
    numbers = {path.name[:2] for path in _trace_files()}
    assert len(numbers) == 23
    assert numbers == set(SCENARIOS)


@pytest.mark.parametrize("path", _trace_files(), ids=lambda p: p.stem)
async def test_trace(path: Path) -> None:
    recorded = json.loads(path.read_text(encoding="utf-8"))
    outcome = await SCENARIOS[path.name[:2]]()
    if "compact" in recorded:
        assert outcome.recorder.lines == recorded["compact"]
    if "events" in recorded:
        assert len(outcome.recorder.events) == len(recorded["events"])
        for ours, theirs in zip(outcome.recorder.events, recorded["events"], strict=True):
            assert ours == theirs
    checked = {"compact", "events"} | METADATA
    for key, value in outcome.facts.items():
        assert key in recorded, f"scenario produced {key!r}, which the trace does not record"
        assert value == recorded[key], key
    missing = set(recorded) - checked - set(outcome.facts)
    assert not missing, f"recorded facts not checked: {sorted(missing)}"
