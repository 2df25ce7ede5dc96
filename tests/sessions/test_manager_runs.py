"""Runs through `SessionManager`: what a run leaves in the database and the event log, and how
each kind of ending is recorded."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from agent_core import (
    AbortSignal,
    AgentTool,
    AssistantMessageEventStream,
    Context,
    Model,
    StreamFn,
    StreamOptions,
)
from agent_core.providers import stream_simple
from sessions.errors import StoreUnavailable
from sessions.profiles import RunContext
from tests.sessions.manager_support import (
    FAST,
    NO_MODEL,
    Directory,
    HarnessFactory,
    echo_tool,
    gated_tool,
    hanging_stream,
    harnesses,
    stalled_stream,
    tool,
    tools_factory,
)

__all__ = ["harnesses"]


async def test_a_run_persists_every_message_and_numbered_event(harnesses: HarnessFactory) -> None:
    h = await harnesses(tools=tools_factory(echo_tool()), check_commits=True)
    session = await h.session()

    answer = await h.send(session, '!tool echo {"text": "hello world"}', "run-1")
    assert answer.status == "started" and answer.run_id == "run-1" and answer.disposition == "queued"
    assert await h.store.inputs.get("run-1") is not None  # recorded before submit returned
    outcome = await h.wait("run-1")

    assert outcome["status"] == "ok"
    assert outcome["terminationReason"] == "no_tool_calls"
    assert outcome["text"] == "echo: hello world"
    assert await h.texts(session.id) == [
        ("user", '!tool echo {"text": "hello world"}'),
        ("assistant", "call:echo"),
        ("toolResult", "hello world"),
        ("assistant", "echo: hello world"),
    ]
    stored = await h.check_log(session.id)
    names = [e.type for e in stored]
    assert names[0] == "status.changed" and stored[0].payload["status"] == "running"
    assert names[-2:] == ["agent.finished", "status.changed"]
    assert stored[-1].payload["status"] == "idle"
    assert stored[-2].payload["terminationReason"] == "no_tool_calls"
    assert {"agent.started", "turn.started", "message.delta", "tool.started", "tool.finished"} <= set(names)
    assert all(e.run_id == "run-1" for e in stored)

    # Entry ids are the messageIds of message.completed, in order; deltas name an open message.
    entries = [e for e in await h.transcript(session.id) if e.kind == "message"]
    completed = [e.payload["messageId"] for e in stored if e.type == "message.completed"]
    assert completed == [e.id for e in entries]
    started = {e.payload["messageId"] for e in stored if e.type == "message.started"}
    assert {e.payload["messageId"] for e in stored if e.type == "message.delta"} <= started
    assert started == set(completed)

    # Published only after commit (read back through another connection; SQLite only), in seq
    # order, each once (check_log checked the order).
    if h.store.backend == "sqlite":
        assert h.recorder.checked == len(stored) and h.recorder.uncommitted == []

    run = await h.store.runs.get("run-1")
    assert run is not None and run.status == "done" and run.termination_reason == "no_tool_calls"
    record = await h.store.inputs.get("run-1")
    assert record is not None and record.status == "done" and record.run_id == "run-1"
    refreshed = await h.store.tree.get_session(session.id)
    assert refreshed is not None and refreshed.status == "idle"


async def test_the_model_is_asked_while_the_prompt_commits_and_tools_wait_for_their_call_to_be_stored(
    harnesses: HarnessFactory,
) -> None:
    """A prompt's entry is queued for the journal and the model asked at once (the commit goes on
    meanwhile); an assistant message with tool calls is stored before its tools run. The log and
    the transcript end the same either way. (A tool's result is stored before the model is asked
    again: `test_deleting_a_session_during_its_run_harms_no_other` needs the refused commit to stop
    the run.)"""
    pending_when_asked: list[int] = []
    stored_when_run: list[list[tuple[str, str]]] = []
    harness: list[Any] = []

    def asking(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        pending_when_asked.append(harness[0].manager.journal.pending_for(options.session_id))
        return stream_simple(model, context, options)

    async def probe(params: dict[str, Any], signal: AbortSignal | None) -> str:
        stored_when_run.append(await harness[0].texts(session.id))
        return "probed"

    h = await harnesses(tools=tools_factory(tool("probe", probe)), stream_fn=asking)
    harness.append(h)
    session = await h.session()
    await h.send(session, '!tool probe {"text": "x"}', "p-1")
    assert (await h.wait("p-1"))["status"] == "ok"
    # The prompt (with the run's opening events) was still queued when the model was first asked.
    assert len(pending_when_asked) == 2 and pending_when_asked[0] >= 1
    # The tool ran only once the prompt and the reply calling it were stored.
    assert stored_when_run == [[("user", '!tool probe {"text": "x"}'), ("assistant", "call:probe")]]
    assert [role for role, _ in await h.texts(session.id)] == ["user", "assistant", "toolResult", "assistant"]
    await h.check_log(session.id)


async def test_usage_of_each_run_is_added_to_the_session(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session()
    totals = []
    for n in range(2):
        await h.send(session, f"message number {n}", f"u-{n}")
        outcome = await h.wait(f"u-{n}")
        totals.append(outcome["usage"])
    assistants = [m for m in await h.messages(session.id) if m["role"] == "assistant"]
    assert [a["usage"]["totalTokens"] for a in assistants] == [t["totalTokens"] for t in totals]
    record = await h.store.tree.get_session(session.id)
    assert record is not None
    assert record.total_tokens == sum(t["totalTokens"] for t in totals) > 0
    assert record.input_tokens == sum(a["usage"]["input"] for a in assistants) > 0
    assert record.output_tokens == sum(a["usage"]["output"] for a in assistants) > 0


async def test_tools_from_the_factory_see_their_run(harnesses: HarnessFactory) -> None:
    seen: list[RunContext] = []

    def factory(ctx: RunContext) -> list[AgentTool]:
        seen.append(ctx)
        return [echo_tool()]

    h = await harnesses(tools=factory)
    session = await h.session()
    await h.send(session, '!tool echo {"text": "from the tool"}', "t-1")
    assert (await h.wait("t-1"))["text"] == "echo: from the tool"
    assert [(c.run_id, c.session.id, c.profile.id, c.model.ref) for c in seen] == [
        ("t-1", session.id, "main", "faux/echo")
    ]
    results = [m for m in await h.messages(session.id) if m["role"] == "toolResult"]
    assert [(r["toolName"], r["content"][0]["text"], r.get("isError", False)) for r in results] == [
        ("echo", "from the tool", False)
    ]


async def test_a_provider_error_ends_the_run_with_error(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session()
    await h.send(session, "!error the model broke", "e-1")
    outcome = await h.wait("e-1")
    assert outcome["status"] == "error"
    assert outcome["terminationReason"] == "error"
    assert outcome["errorMessage"] == "the model broke"
    last = (await h.messages(session.id))[-1]
    assert last["role"] == "assistant" and last["stopReason"] == "error"
    stored = await h.check_log(session.id)
    finished = [e for e in stored if e.type == "agent.finished"]
    assert finished[0].payload["terminationReason"] == "error"
    assert finished[0].payload["errorMessage"] == "the model broke"
    run = await h.store.runs.get("e-1")
    assert run is not None and run.status == "error" and run.termination_reason == "error"
    again = await h.send(session, "!error the model broke", "e-1")
    assert again.status == "error"


async def test_a_failing_tools_factory_ends_the_run_with_error(harnesses: HarnessFactory) -> None:
    def factory(ctx: RunContext) -> list[AgentTool]:
        raise RuntimeError("no tools today")

    h = await harnesses(tools=factory)
    session = await h.session()
    await h.send(session, "hello", "f-1")
    outcome = await h.wait("f-1")
    assert outcome["status"] == "error"
    assert outcome["terminationReason"] == "error"
    assert "no tools today" in outcome["errorMessage"]
    await h.check_log(session.id)
    record = await h.store.tree.get_session(session.id)
    assert record is not None and record.status == "idle"
    run = await h.store.runs.get("f-1")
    assert run is not None and run.status == "error"


async def test_a_missing_model_ends_the_run_with_a_helpful_error(harnesses: HarnessFactory) -> None:
    h = await harnesses(directory=Directory(model=None))
    session = await h.session()
    await h.send(session, "hello", "m-1")
    outcome = await h.wait("m-1")
    assert outcome["status"] == "error"
    assert outcome["errorMessage"] == NO_MODEL  # the directory's own explanation
    await h.check_log(session.id)


async def test_user_abort_ends_the_run_as_aborted(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    session = await h.session()
    await h.send(session, "!sleep 20000 never said", "a-1")
    await h.wait_for_event(session.id, "message.started", role="assistant")
    assert await h.manager.abort(session.id) == ["a-1"]
    outcome = await h.wait("a-1")
    assert outcome["status"] == "aborted"
    assert outcome["terminationReason"] == "aborted"
    last = (await h.messages(session.id))[-1]
    assert last["role"] == "assistant" and last["stopReason"] == "aborted"
    stored = await h.check_log(session.id)
    assert [e.payload["terminationReason"] for e in stored if e.type == "agent.finished"] == ["aborted"]
    run = await h.store.runs.get("a-1")
    assert run is not None and run.status == "aborted" and run.termination_reason == "aborted"
    assert (await h.send(session, "!sleep 20000 never said", "a-1")).status == "aborted"
    assert await h.manager.abort(session.id) == []  # nothing left to abort


async def test_max_duration_stops_a_long_run_keeping_what_was_streamed(harnesses: HarnessFactory) -> None:
    settings = msgspec.structs.replace(FAST, max_duration_s=0.3)
    h = await harnesses(settings=settings, directory=Directory(pace_ms=5))
    session = await h.session()
    await h.send(session, "!long 2000", "d-1")
    outcome = await h.wait("d-1")
    assert outcome["status"] == "aborted"
    assert outcome["terminationReason"] == "max_duration"
    assert "maximum duration" in outcome["errorMessage"]
    last = (await h.messages(session.id))[-1]
    assert last["stopReason"] == "aborted"
    text = last["content"][0]["text"]
    assert text.startswith("w1 w2 ") and "w2000" not in text
    stored = await h.check_log(session.id)
    assert [e.payload["terminationReason"] for e in stored if e.type == "agent.finished"] == ["max_duration"]
    run = await h.store.runs.get("d-1")
    assert run is not None and run.termination_reason == "max_duration"


async def test_idle_timeout_stops_a_stalled_stream(harnesses: HarnessFactory) -> None:
    stalls: list[StreamFn] = [stalled_stream, hanging_stream]
    for index, stream_fn in enumerate(stalls):
        settings = msgspec.structs.replace(FAST, idle_timeout_s=0.2)
        h = await harnesses(settings=settings, stream_fn=stream_fn)
        session = await h.session(f"agent:main:stall-{index}")
        await h.send(session, "anyone there?", f"i-{index}")
        outcome = await h.wait(f"i-{index}")
        assert outcome["status"] == "aborted"
        assert outcome["terminationReason"] == "idle_timeout"
        assert "sent nothing" in outcome["errorMessage"]
        stored = await h.check_log(session.id)
        assert [e.payload["terminationReason"] for e in stored if e.type == "agent.finished"] == [
            "idle_timeout"
        ]
        run = await h.store.runs.get(f"i-{index}")
        assert run is not None and run.termination_reason == "idle_timeout"
        await harnesses.close(h)


async def test_a_run_that_ignores_its_abort_is_stopped_hard(harnesses: HarnessFactory) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    settings = msgspec.structs.replace(FAST, abort_grace_s=0.2)
    h = await harnesses(settings=settings, tools=tools_factory(gated_tool(gate, entered)))
    session = await h.session()
    await h.send(session, '!tool gate {"text": "stuck"}', "h-1")
    await asyncio.wait_for(entered.wait(), 10)
    await h.manager.abort(session.id)
    outcome = await h.wait("h-1")
    assert outcome["status"] == "aborted" and outcome["terminationReason"] == "aborted"
    texts = await h.texts(session.id)
    assert [role for role, _ in texts] == ["user", "assistant", "toolResult", "assistant"]
    results = [m for m in await h.messages(session.id) if m["role"] == "toolResult"]
    assert results[0]["isError"] is True
    assert (await h.messages(session.id))[-1]["stopReason"] == "aborted"
    await h.check_log(session.id)
    gate.set()


async def test_shutdown_aborts_runs_that_outlive_the_grace_period(harnesses: HarnessFactory) -> None:
    h = await harnesses()
    quick = await h.session("agent:main:quick")
    slow = await h.session("agent:main:slow")
    await h.send(slow, "!sleep 20000 too slow", "s-slow")
    await h.send(quick, "!sleep 100 just in time", "s-quick")
    await h.wait_for_event(slow.id, "message.started", role="assistant")
    await h.manager.aclose(grace_s=1.0)
    with pytest.raises(StoreUnavailable):
        await h.send(quick, "too late", "s-late")
    await harnesses.close(h)

    after = await harnesses()
    run = await after.store.runs.get("s-slow")
    assert run is not None and (run.status, run.termination_reason) == ("interrupted", "gateway_shutdown")
    record = await after.store.tree.get_session(slow.id)
    assert record is not None and record.status == "interrupted"
    events = await after.events(slow.id)
    assert [e.payload["terminationReason"] for e in events if e.type == "agent.finished"] == [
        "gateway_shutdown"
    ]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert (await after.messages(slow.id))[-1]["stopReason"] == "aborted"
    assert (await after.send(slow, "!sleep 20000 too slow", "s-slow")).status == "aborted"

    run = await after.store.runs.get("s-quick")
    assert run is not None and (run.status, run.termination_reason) == ("done", "no_tool_calls")
    assert (await after.send(quick, "!sleep 100 just in time", "s-quick")).status == "ok"
    # The interrupted session takes new work.
    await after.send(slow, "again", "s-again")
    assert (await after.wait("s-again"))["status"] == "ok"


async def test_aborting_a_parent_aborts_its_subagents(harnesses: HarnessFactory) -> None:
    box: dict[str, Any] = {}

    async def spawn(params: dict[str, Any], signal: AbortSignal | None) -> str:
        h = box["h"]
        parent = box["parent"]
        child = await h.store.tree.create_session(
            agent_id="main", key="agent:main:main:subagent:1", kind="subagent", parent_id=parent.id
        )
        box["child"] = child
        await h.send(child, str(params["text"]), "child-run")
        outcome = await h.wait("child-run")
        return f"child said {outcome.get('text')!r} ({outcome['status']})"

    h = await harnesses(tools=tools_factory(tool("spawn", spawn)))
    parent = await h.session()
    box.update(h=h, parent=parent)
    await h.send(parent, '!tool spawn {"text": "!sleep 20000 child work"}', "parent-run")
    await h.wait_for(lambda: "child" in box)
    child = box["child"]
    await h.wait_for_event(child.id, "message.started", role="assistant")

    aborted = await h.manager.abort(parent.id)
    assert set(aborted) == {"parent-run", "child-run"}
    child_outcome = await h.wait("child-run")
    assert child_outcome["status"] == "aborted" and child_outcome["terminationReason"] == "aborted"
    parent_outcome = await h.wait("parent-run")
    assert parent_outcome["status"] == "aborted" and parent_outcome["terminationReason"] == "aborted"
    child_run = await h.store.runs.get("child-run")
    assert child_run is not None and child_run.termination_reason == "aborted"
    await h.check_log(child.id)
    await h.check_log(parent.id)


async def test_deleting_a_session_during_its_run_harms_no_other(harnesses: HarnessFactory) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    h = await harnesses(tools=tools_factory(gated_tool(gate, entered)))
    doomed = await h.session("agent:main:doomed")
    other = await h.session("agent:main:other")
    await h.send(doomed, '!tool gate {"text": "too late"}', "del-1")
    await asyncio.wait_for(entered.wait(), 10)
    await h.send(other, "meanwhile", "del-2")
    assert (await h.wait("del-2"))["status"] == "ok"
    assert await h.store.tree.delete_session(doomed.id) == 1
    gate.set()
    await h.wait_for(lambda: h.manager.running_count() == 0 and not h.manager.active_run_ids(doomed.id))
    assert await h.store.inputs.get("del-1") is None
    await h.send(other, "still working", "del-3")
    assert (await h.wait("del-3"))["status"] == "ok"
    await h.check_log(other.id)
    assert h.manager.journal.pending == 0
