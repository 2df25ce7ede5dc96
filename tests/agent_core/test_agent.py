"""The stateful Agent: state, subscriptions, queues, prompt/continue rules, failures, abort."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from agent_core import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentEvent,
    AgentMessage,
    AgentOptions,
    AgentTool,
    AgentToolResult,
    AssistantMessageEventStream,
    Context,
    ContinueError,
    DoneEvent,
    ImageContent,
    Model,
    StreamOptions,
    ToolUpdateCallback,
)
from agent_core.agent import DEFAULT_MODEL
from tests.agent_core._compact import Recorder, render
from tests.agent_core._scripted import (
    MODEL,
    Producer,
    ScriptedStream,
    assistant,
    call,
    done_only,
    text,
    until_aborted,
    user,
)

BUSY_PROMPT = (
    "Agent is already processing a prompt. "
    "Use steer() or followUp() to queue messages, or wait for completion."
)
BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."


def reply(value: str) -> Producer:
    return done_only(assistant(text(value)))


def echo(body_hook: Any = None) -> AgentTool:
    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        if body_hook is not None:
            await body_hook(tool_call_id, signal, on_update)
        return AgentToolResult(content=[text(f"echoed: {params['value']}")], details={})

    return AgentTool(
        name="echo",
        label="echo",
        description="echo",
        parameters={"type": "object", "properties": {"value": {"type": "string"}}},
        execute=execute,
    )


def tool_turn(value: str = "a") -> Producer:
    return done_only(assistant(call("tool-1", "echo", {"value": value}), stop_reason="toolUse"))


# --- state ------------------------------------------------------------------------------------


def test_default_state() -> None:
    agent = Agent()
    state = agent.state
    assert state.system_prompt == ""
    assert state.model is DEFAULT_MODEL
    assert (state.model.id, state.model.api, state.model.provider) == ("unknown", "unknown", "unknown")
    assert state.thinking_level == "off"
    assert state.tools == [] and state.messages == []
    assert state.is_streaming is False
    assert state.streaming_message is None
    assert state.pending_tool_calls == frozenset()
    assert state.error_message is None
    assert agent.steering_mode == "one-at-a-time" and agent.follow_up_mode == "one-at-a-time"
    assert agent.options == AgentOptions()
    assert agent.signal is None


def test_initial_state_is_kept_and_its_lists_copied() -> None:
    tools = [echo()]
    messages: list[AgentMessage] = [user("hi")]
    agent = Agent(
        initial_state={
            "system_prompt": "s",
            "model": MODEL,
            "thinking_level": "high",
            "tools": tools,
            "messages": messages,
        }
    )
    assert (
        agent.state.model is MODEL
        and agent.state.thinking_level == "high"
        and agent.state.system_prompt == "s"
    )
    assert agent.state.tools == tools and agent.state.tools is not tools
    assert agent.state.messages == messages and agent.state.messages is not messages


def test_assigning_tools_and_messages_copies_the_list_but_appending_mutates_the_state() -> None:
    agent = Agent()
    tools = [echo()]
    agent.state.tools = tools
    assert agent.state.tools == tools and agent.state.tools is not tools
    messages: list[AgentMessage] = [user("a")]
    agent.state.messages = messages
    messages.append(user("b"))
    assert len(agent.state.messages) == 1
    agent.state.messages.append(user("c"))
    assert [render(m) for m in agent.state.messages] == ["user:a", "user:c"]


def test_subscribe_emits_nothing_and_unsubscribe_stops_delivery() -> None:
    agent = Agent()
    seen: list[AgentEvent] = []
    unsubscribe = agent.subscribe(lambda event, signal: seen.append(event))
    agent.state.system_prompt = "changed"
    agent.state.messages = [user("x")]
    assert seen == []
    unsubscribe()
    unsubscribe()  # idempotent


def test_queued_messages_are_not_in_the_transcript_and_abort_when_idle_is_harmless() -> None:
    agent = Agent()
    agent.steer(user("s"))
    agent.follow_up(user("f"))
    assert agent.state.messages == []
    assert agent.has_queued_messages() and agent.pending_message_count == 2
    agent.abort()
    agent.clear_steering_queue()
    assert agent.pending_message_count == 1
    agent.clear_follow_up_queue()
    assert not agent.has_queued_messages()
    agent.steer(user("s2"))
    agent.follow_up(user("f2"))
    agent.clear_all_queues()
    assert not agent.has_queued_messages()


def test_drain_queues_returns_steering_then_follow_ups() -> None:
    agent = Agent()
    agent.follow_up(user("f"))
    agent.steer(user("s1"))
    agent.steer(user("s2"))
    assert [render(m) for m in agent.drain_queues()] == ["user:s1", "user:s2", "user:f"]
    assert not agent.has_queued_messages()


async def test_reset_clears_transcript_runtime_fields_and_queues() -> None:
    async with ScriptedStream(done_only(assistant(stop_reason="error", error_message="bad"))) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        await agent.prompt("hi")
    assert agent.state.error_message == "bad"
    agent.steer(user("s"))
    agent.reset()
    assert agent.state.messages == [] and agent.state.error_message is None
    assert not agent.has_queued_messages()


# --- prompt -------------------------------------------------------------------------------------


async def test_prompt_text_with_images_becomes_one_user_message() -> None:
    image = ImageContent(data="aGk=", mime_type="image/png")
    async with ScriptedStream(reply("ok")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        await agent.prompt("look", images=[image])
    first = agent.state.messages[0].dump()
    assert first["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "data": "aGk=", "mimeType": "image/png"},
    ]
    assert isinstance(first["timestamp"], int)


async def test_prompt_accepts_a_message_or_a_list_of_messages() -> None:
    async with ScriptedStream(reply("1"), reply("2")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        await agent.prompt(user("one"))
        await agent.prompt([user("two"), user("three")])
    assert [render(m) for m in agent.state.messages] == [
        "user:one", "assistant[stop]:text(1)", "user:two", "user:three", "assistant[stop]:text(2)",
    ]  # fmt: skip


async def test_prompt_and_continue_while_running_raise_pi_texts() -> None:
    async with ScriptedStream(until_aborted()) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        run = asyncio.ensure_future(agent.prompt("first"))
        while agent.state.streaming_message is None or agent.state.streaming_message.role != "assistant":
            await asyncio.sleep(0)
        with pytest.raises(AgentBusyError) as prompt_error:
            await agent.prompt("second")
        with pytest.raises(AgentBusyError) as continue_error:
            await agent.continue_()
        agent.abort()
        await run
    assert str(prompt_error.value) == BUSY_PROMPT
    assert str(continue_error.value) == BUSY_CONTINUE
    assert render(agent.state.messages[-1]) == "assistant[aborted:Request was aborted]:"
    assert agent.state.error_message == "Request was aborted"


async def test_loop_options_come_from_the_agent_and_stay_mutable_between_prompts() -> None:
    async def get_api_key(provider: str) -> str:
        return f"key-for-{provider}"

    async with ScriptedStream(reply("1"), reply("2")) as script:
        stream = StreamOptions(
            session_id="first",
            temperature=0.5,
            max_tokens=10,
            max_retries=1,
            max_retry_delay_ms=20,
            timeout_ms=30,
            headers={"h": "v"},
        )
        options = AgentOptions(get_api_key=get_api_key, stream=stream)
        agent = Agent(
            initial_state={"model": MODEL, "thinking_level": "medium"}, options=options, stream_fn=script
        )
        assert agent.options is options
        await agent.prompt("a")
        agent.options.stream.session_id = "second"
        agent.state.thinking_level = "off"
        await agent.prompt("b")
    first, second = script.calls[0][2], script.calls[1][2]
    assert (first.session_id, first.reasoning, first.api_key) == ("first", "medium", "key-for-openai")
    limits = (
        first.temperature,
        first.max_tokens,
        first.max_retries,
        first.max_retry_delay_ms,
        first.timeout_ms,
    )
    assert limits == (0.5, 10, 1, 20, 30)
    assert first.headers == {"h": "v"}
    assert (second.session_id, second.reasoning) == ("second", None)
    assert stream.reasoning is None  # the thinking level goes to each run's copy only


async def test_the_loop_works_on_a_snapshot_of_the_transcript() -> None:
    seen: list[int] = []

    def stream_fn(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        seen.append(len(context.messages))
        stream = AssistantMessageEventStream()
        stream.push(done_event("ok"))
        return stream

    agent = Agent(initial_state={"model": MODEL, "messages": [user("old")]}, stream_fn=stream_fn)

    def meddle(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "turn_start":
            agent.state.messages.append(user("added by a listener"))

    agent.subscribe(meddle)
    await agent.prompt("new")
    assert seen == [2]


def done_event(value: str) -> DoneEvent:
    return DoneEvent(reason="stop", message=assistant(text(value)))


# --- continue -----------------------------------------------------------------------------------


async def test_continue_rules_without_a_run() -> None:
    with pytest.raises(ContinueError, match=r"^No messages to continue from$"):
        await Agent().continue_()
    agent = Agent(initial_state={"messages": [user("a"), assistant(text("b"))]})
    with pytest.raises(ContinueError, match=r"^Cannot continue from message role: assistant$"):
        await agent.continue_()


async def test_continue_with_an_assistant_tail_runs_a_queued_follow_up() -> None:
    async with ScriptedStream(reply("r")) as script:
        agent = Agent(
            initial_state={"model": MODEL, "messages": [user("a"), assistant(text("b"))]}, stream_fn=script
        )
        agent.follow_up(user("later"))
        await agent.continue_()
    assert [render(m) for m in agent.state.messages] == [
        "user:a",
        "assistant[stop]:text(b)",
        "user:later",
        "assistant[stop]:text(r)",
    ]


async def test_continue_with_two_steers_delivers_one_per_turn() -> None:
    async with ScriptedStream(reply("r1"), reply("r2")) as script:
        agent = Agent(
            initial_state={"model": MODEL, "messages": [user("a"), assistant(text("b"))]}, stream_fn=script
        )
        agent.steer(user("s1"))
        agent.steer(user("s2"))
        await agent.continue_()
    assert [m.role for m in agent.state.messages[-4:]] == ["user", "assistant", "user", "assistant"]
    assert len(script.calls) == 2


async def test_continue_from_a_user_tail_runs_the_continuation() -> None:
    async with ScriptedStream(reply("r")) as script:
        agent = Agent(initial_state={"model": MODEL, "messages": [user("a")]}, stream_fn=script)
        rec = Recorder()
        agent.subscribe(rec.listener)
        await agent.continue_()
    assert rec.types == ["agent_start", "turn_start", "message_start", "message_end", "turn_end", "agent_end"]
    assert [render(m) for m in agent.state.messages] == ["user:a", "assistant[stop]:text(r)"]


# --- queue modes --------------------------------------------------------------------------------


async def test_steering_mode_all_delivers_every_queued_message_in_one_turn() -> None:
    async with ScriptedStream(reply("r1"), reply("r2")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script, steering_mode="all")

        def queue(event: AgentEvent, signal: AbortSignal) -> None:
            if event.type == "message_start" and event.message.role == "assistant" and len(script.calls) == 1:
                agent.steer(user("s1"))
                agent.steer(user("s2"))

        agent.subscribe(queue)
        await agent.prompt("start")
    assert len(script.calls) == 2
    assert [render(m) for m in script.calls[1][1].messages[-2:]] == ["user:s1", "user:s2"]


async def test_follow_up_mode_all_delivers_every_queued_message_in_one_turn() -> None:
    async with ScriptedStream(reply("r1"), reply("r2")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        agent.follow_up_mode = "all"
        agent.follow_up(user("f1"))
        agent.follow_up(user("f2"))
        await agent.prompt("start")
    assert len(script.calls) == 2
    assert [render(m) for m in agent.state.messages] == [
        "user:start", "assistant[stop]:text(r1)", "user:f1", "user:f2", "assistant[stop]:text(r2)",
    ]  # fmt: skip


async def test_steering_queued_before_the_run_is_delivered_in_the_first_turn() -> None:
    async with ScriptedStream(reply("r1")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        agent.steer(user("early"))
        await agent.prompt("start")
    assert [render(m) for m in script.calls[0][1].messages] == ["user:start", "user:early"]


# --- listeners ----------------------------------------------------------------------------------


async def test_async_subscribers_are_awaited_before_prompt_resolves() -> None:
    barrier = asyncio.Event()

    async def slow(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_end":
            await barrier.wait()

    async with ScriptedStream(reply("ok")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        agent.subscribe(slow)
        run = asyncio.ensure_future(agent.prompt("hi"))
        await asyncio.sleep(0.01)
        assert not run.done() and agent.state.is_streaming
        barrier.set()
        await run
    assert not agent.state.is_streaming


async def test_wait_for_idle_waits_for_async_subscribers() -> None:
    barrier = asyncio.Event()

    async def slow(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end" and event.message.role == "assistant":
            await barrier.wait()

    async with ScriptedStream(reply("ok")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        agent.subscribe(slow)
        run = asyncio.ensure_future(agent.prompt("hi"))
        await asyncio.sleep(0)
        idle = asyncio.ensure_future(agent.wait_for_idle())
        await asyncio.sleep(0.01)
        assert not idle.done()
        barrier.set()
        await idle
        assert not agent.state.is_streaming
        await run
    await agent.wait_for_idle()  # idle: returns at once


async def test_listeners_run_after_the_reducer_in_subscription_order() -> None:
    order: list[str] = []

    async with ScriptedStream(reply("ok")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)

        def first(event: AgentEvent, signal: AbortSignal) -> None:
            if event.type == "message_end" and event.message.role == "assistant":
                order.append(f"first sees {len(agent.state.messages)} messages")

        async def second(event: AgentEvent, signal: AbortSignal) -> None:
            if event.type == "message_end" and event.message.role == "assistant":
                order.append("second")

        agent.subscribe(first)
        agent.subscribe(second)
        await agent.prompt("hi")
    assert order == ["first sees 2 messages", "second"]


async def test_subscribers_receive_the_active_signal() -> None:
    signals: list[AbortSignal] = []

    def grab(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_start":
            signals.append(signal)
            assert not signal.aborted

    async with ScriptedStream(until_aborted()) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        agent.subscribe(grab)
        run = asyncio.ensure_future(agent.prompt("hi"))
        while not signals:
            await asyncio.sleep(0)
        assert agent.signal is signals[0]
        agent.abort("stop now")
        await run
    assert signals[0].aborted and signals[0].reason == "stop now"
    assert agent.signal is None


async def test_state_tracks_streaming_message_and_pending_tool_calls() -> None:
    snapshots: list[tuple[str, frozenset[str]]] = []

    async def inside(tool_call_id: str, signal: Any, on_update: Any) -> None:
        snapshots.append(("tool", agent.state.pending_tool_calls))

    async with ScriptedStream(tool_turn(), reply("done")) as script:
        agent = Agent(initial_state={"model": MODEL, "tools": [echo(inside)]}, stream_fn=script)

        def watch(event: AgentEvent, signal: AbortSignal) -> None:
            if event.type == "message_start":
                assert agent.state.streaming_message is event.message
            if event.type == "message_end":
                assert agent.state.streaming_message is None

        agent.subscribe(watch)
        await agent.prompt("go")
    assert snapshots == [("tool", frozenset({"tool-1"}))]
    assert agent.state.pending_tool_calls == frozenset()


# --- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["stream_fn", "convert_to_llm", "transform_context"])
async def test_a_throwing_hook_becomes_a_synthetic_error_message(where: str) -> None:
    def boom(*args: Any) -> Any:
        raise RuntimeError(f"{where} exploded")

    async def transform_boom(messages: list[AgentMessage], signal: AbortSignal | None) -> list[AgentMessage]:
        raise RuntimeError(f"{where} exploded")

    agent = Agent(initial_state={"model": MODEL}, stream_fn=ScriptedStream(reply("never")))
    if where == "stream_fn":
        agent.stream_fn = boom
    elif where == "convert_to_llm":
        agent.options.convert_to_llm = boom
    else:
        agent.options.transform_context = transform_boom
    rec = Recorder()
    agent.subscribe(rec.listener)
    await agent.prompt("hello")
    assert rec.types == ["agent_start", "turn_start", "message_start", "message_end", "agent_end"]
    assert rec.events[-1]["messages"][0]["errorMessage"] == f"{where} exploded"
    assert [render(m) for m in agent.state.messages] == [
        "user:hello",
        f"assistant[error:{where} exploded]:text()",
    ]
    assert agent.state.error_message == f"{where} exploded"
    assert not agent.state.is_streaming


async def test_a_throwing_listener_ends_the_run_with_a_second_agent_end() -> None:
    calls_seen: list[str] = []

    def fussy(event: AgentEvent, signal: AbortSignal) -> None:
        calls_seen.append(event.type)
        if event.type == "agent_end" and calls_seen.count("agent_end") == 1:
            raise RuntimeError("listener broke")

    async with ScriptedStream(reply("ok")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        agent.subscribe(fussy)
        await agent.prompt("hi")
    assert calls_seen.count("agent_end") == 2
    assert [render(m) for m in agent.state.messages] == [
        "user:hi", "assistant[stop]:text(ok)", "assistant[error:listener broke]:text()",
    ]  # fmt: skip


async def test_a_failure_after_abort_is_recorded_as_aborted() -> None:
    agent = Agent(initial_state={"model": MODEL})

    def stream_fn(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        agent.abort()
        raise RuntimeError("gave up")

    agent.stream_fn = stream_fn
    await agent.prompt("hi")
    assert render(agent.state.messages[-1]) == "assistant[aborted:gave up]:text()"


async def test_late_tool_update_under_the_agent_is_ignored__pi_0_73_1_throws() -> None:
    kept: list[ToolUpdateCallback] = []

    async def inside(tool_call_id: str, signal: Any, on_update: ToolUpdateCallback | None) -> None:
        assert on_update is not None
        kept.append(on_update)
        on_update(AgentToolResult(content=[text("partial")]))

    async with ScriptedStream(tool_turn(), reply("done")) as script:
        agent = Agent(initial_state={"model": MODEL, "tools": [echo(inside)]}, stream_fn=script)
        rec = Recorder()
        agent.subscribe(rec.listener)
        await agent.prompt("go")
    count = len(rec.lines)
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        kept[0](AgentToolResult(content=[text("after the run")]))
        await asyncio.sleep(0.01)
        kept.clear()  # drop the callback so anything it started is collected (and reported) now
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert unhandled == []
    assert len(rec.lines) == count
    assert rec.types.count("tool_execution_update") == 1


# --- abort and cancellation ---------------------------------------------------------------------


async def test_abort_reaches_a_running_tool_and_the_next_model_call() -> None:
    seen: list[bool] = []

    async def inside(tool_call_id: str, signal: AbortSignal | None, on_update: Any) -> None:
        assert signal is not None
        agent.abort()
        seen.append(signal.aborted)

    async with ScriptedStream(tool_turn(), until_aborted()) as script:
        agent = Agent(initial_state={"model": MODEL, "tools": [echo(inside)]}, stream_fn=script)
        await agent.prompt("go")
    assert seen == [True]
    assert script.calls[1][2].signal is not None and script.calls[1][2].signal.aborted
    assert render(agent.state.messages[-1]) == "assistant[aborted:Request was aborted]:"


async def test_cancelling_prompt_aborts_the_run_signal_and_frees_the_agent() -> None:
    async with ScriptedStream(until_aborted(), reply("again")) as script:
        agent = Agent(initial_state={"model": MODEL}, stream_fn=script)
        run = asyncio.ensure_future(agent.prompt("hi"))
        while agent.signal is None or not script.calls:
            await asyncio.sleep(0)
        signal = agent.signal
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert signal.aborted
        assert not agent.state.is_streaming and agent.signal is None
        await agent.prompt("next")
    assert render(agent.state.messages[-1]) == "assistant[stop]:text(again)"
