from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol.compat import (
    RunStream,
    message_text,
    render_compat,
    render_session_message,
    render_sessions_changed,
)
from sessions import (
    AgentFinished,
    AgentStarted,
    ErrorReported,
    EventPayload,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    StatusChanged,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFinished,
    TurnStarted,
)
from sessions.schema import SessionStatus
from sessions.termination import TerminationReason
from tests.gateway.protocol._captures import example, records
from tests.gateway.protocol._session import Session

# --- OpenClaw agent / chat --------------------------------------------------------------------


def test_a_short_run_renders_exactly_the_frames_the_cli_accepted() -> None:
    captured = [r["frame"] for r in records("fake_run_events.jsonl")]
    first = captured[0]["payload"]
    ts = first["ts"]
    run = RunStream(run_id=first["runId"], session_key=first["sessionKey"], agent_id="main")
    session = Session(key=first["sessionKey"], run_id=first["runId"])
    out: list[tuple[str, dict[str, Any]]] = []
    steps: list[EventPayload] = [
        AgentStarted(),
        TurnStarted(turn_index=0),
        MessageStarted(message_id="m1", role="assistant"),
        MessageDelta(message_id="m1", content_index=0, kind="text", delta="pong"),
        MessageCompleted(
            message_id="m1", message={"role": "assistant", "content": [{"type": "text", "text": "pong"}]}
        ),
        TurnFinished(turn_index=0, has_tool_calls=False),
        AgentFinished(
            termination_reason=TerminationReason.NO_TOOL_CALLS,
            total_turns=1,
            total_tokens=3,
            duration_ms=0,
            stop_reason="stop",
        ),
    ]
    for data in steps:
        rendered = render_compat(session.event(data, ts=ts), run)
        if rendered is None:
            continue
        if rendered.agent is not None:
            out.append(("agent", rendered.agent))
        if rendered.chat is not None:
            out.append(("chat", rendered.chat))
    assert [name for name, _ in out] == [frame["event"] for frame in captured]
    for (name, payload), frame in zip(out, captured, strict=True):
        expected = frame["payload"]
        if name == "agent" and expected["data"].get("phase") == "end":
            # The real gateway also reports when the run started; the capture's fake left it out.
            assert payload["data"].pop("startedAt") == ts
        assert payload == expected, name


def test_a_failed_run_matches_the_real_gateways_error_frames() -> None:
    real_agent = example("agent_events.json")[-1]["payload"]
    real_chat = example("chat_events.json")[-1]["payload"]
    run = RunStream(
        run_id=real_agent["runId"],
        session_key=real_agent["sessionKey"],
        session_id=real_agent["sessionId"],
        agent_id="main",
    )
    session = Session(key=real_agent["sessionKey"], run_id=real_agent["runId"])
    started = render_compat(session.event(AgentStarted(), ts=real_agent["data"]["startedAt"]), run)
    assert started is not None and started.agent is not None and started.agent["seq"] == 1
    finished = render_compat(
        session.event(
            AgentFinished(
                termination_reason=TerminationReason.ERROR,
                total_turns=0,
                total_tokens=0,
                duration_ms=388,
                stop_reason="error",
                error_message=real_agent["data"]["error"],
            ),
            ts=real_agent["ts"],
        ),
        run,
    )
    assert finished is not None
    assert finished.agent == real_agent
    assert finished.chat == real_chat
    assert not finished.tool and not finished.droppable


def test_deltas_are_droppable_and_cumulative() -> None:
    run = RunStream(run_id="r", session_key="k")
    session = Session(key="k", run_id="r")
    render_compat(session.event(AgentStarted()), run)
    render_compat(session.event(MessageStarted(message_id="m", role="assistant")), run)
    first = render_compat(
        session.event(MessageDelta(message_id="m", content_index=0, kind="text", delta="Hel")), run
    )
    second = render_compat(
        session.event(MessageDelta(message_id="m", content_index=0, kind="text", delta="lo")), run
    )
    assert first is not None and second is not None and second.agent is not None and second.chat is not None
    assert second.droppable
    assert second.agent["data"] == {"text": "Hello", "delta": "lo"}
    assert second.chat["deltaText"] == "lo"
    assert second.chat["message"]["content"] == [{"type": "text", "text": "Hello"}]
    assert second.chat["seq"] == second.agent["seq"] == 3


def test_thinking_toolcall_deltas_and_bookkeeping_events_render_nothing_and_consume_no_seq() -> None:
    run = RunStream(run_id="r", session_key="k")
    session = Session(key="k", run_id="r")
    quiet: list[EventPayload] = [
        TurnStarted(turn_index=0),
        MessageStarted(message_id="m", role="user"),
        MessageDelta(message_id="m", content_index=0, kind="thinking", delta="..."),
        MessageDelta(message_id="m", content_index=1, kind="toolcall", delta="{"),
        MessageCompleted(message_id="u", message={"role": "user", "content": "hi"}),
        TurnFinished(turn_index=0, has_tool_calls=False),
        ErrorReported(code="x", message="y", recoverable=True),
        StatusChanged(SessionStatus.RUNNING),
    ]
    for data in quiet:
        assert render_compat(session.event(data), run) is None
    assert run.seq == 0


def test_tool_events_go_on_the_tool_stream() -> None:
    run = RunStream(run_id="r", session_key="k", agent_id="main")
    session = Session(key="k", run_id="r")
    started = render_compat(
        session.event(ToolStarted(tool_call_id="t1", tool_name="bash", args={"command": "ls"})), run
    )
    updated = render_compat(
        session.event(ToolUpdated(tool_call_id="t1", tool_name="bash", partial_result="a")), run
    )
    finished = render_compat(
        session.event(
            ToolFinished(tool_call_id="t1", tool_name="bash", result="a\n", is_error=False, duration_ms=5)
        ),
        run,
    )
    assert started is not None and updated is not None and finished is not None
    assert all(r.tool and r.chat is None for r in (started, updated, finished))
    assert started.agent is not None and updated.agent is not None and finished.agent is not None
    assert started.agent["stream"] == "tool"
    assert started.agent["data"] == {
        "phase": "start",
        "name": "bash",
        "toolCallId": "t1",
        "args": {"command": "ls"},
    }
    assert updated.agent["data"] == {
        "phase": "update",
        "name": "bash",
        "toolCallId": "t1",
        "partialResult": "a",
    }
    assert finished.agent["data"] == {
        "phase": "result",
        "name": "bash",
        "toolCallId": "t1",
        "isError": False,
        "result": "a\n",
    }
    assert updated.droppable and not finished.droppable
    assert [started.agent["seq"], updated.agent["seq"], finished.agent["seq"]] == [1, 2, 3]


def test_final_carries_the_last_assistant_text_usage_and_stop_reason() -> None:
    run = RunStream(run_id="r", session_key="k")
    session = Session(key="k", run_id="r")
    render_compat(session.event(AgentStarted(), ts=10), run)
    render_compat(
        session.event(
            MessageCompleted(
                message_id="a1",
                message={
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "Done."}],
                },
            )
        ),
        run,
    )
    usage = {"input": 10, "output": 2, "totalTokens": 12}
    final = render_compat(
        session.event(
            AgentFinished(
                termination_reason=TerminationReason.NO_TOOL_CALLS,
                total_turns=1,
                total_tokens=12,
                duration_ms=5,
                stop_reason="length",
                usage=usage,
            ),
            ts=20,
        ),
        run,
    )
    assert final is not None and final.chat is not None and final.agent is not None
    assert final.agent["data"] == {"phase": "end", "startedAt": 10, "endedAt": 20}
    assert final.chat == {
        "runId": "r",
        "sessionKey": "k",
        "seq": 2,
        "state": "final",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}], "timestamp": 20},
        "usage": usage,
        "stopReason": "length",
    }


@pytest.mark.parametrize("reason", ["aborted", "gateway_shutdown"])
def test_aborted_runs(reason: str) -> None:
    run = RunStream(run_id="r", session_key="k")
    session = Session(key="k", run_id="r")
    render_compat(session.event(AgentStarted()), run)
    render_compat(
        session.event(MessageDelta(message_id="m", content_index=0, kind="text", delta="partial")), run
    )
    out = render_compat(
        session.event(
            AgentFinished(
                termination_reason=TerminationReason(reason),
                total_turns=1,
                total_tokens=0,
                duration_ms=1,
                stop_reason="aborted",
            )
        ),
        run,
    )
    assert out is not None and out.chat is not None and out.agent is not None
    assert out.chat["state"] == "aborted"
    assert out.chat["stopReason"] == "aborted"
    assert out.chat["message"]["content"] == [{"type": "text", "text": "partial"}]
    assert out.agent["data"]["phase"] == "end" and out.agent["data"]["aborted"] is True


def test_message_text() -> None:
    assert message_text({"content": "plain"}) == "plain"
    assert (
        message_text(
            {
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "toolCall", "id": "x"},
                    {"type": "text", "text": "b"},
                ]
            }
        )
        == "ab"
    )
    assert message_text({}) == ""


# --- session list and transcript events -------------------------------------------------------


def test_session_message_against_the_captured_one() -> None:
    captured = example("session.message.json")["payload"]
    row = captured["session"]
    payload = render_session_message(
        session_key=captured["sessionKey"],
        agent_id=captured["agentId"],
        message=captured["message"],
        message_id=captured["messageId"],
        message_seq=captured["messageSeq"],
        session_row=row,
    )
    for key in ("sessionKey", "agentId", "message", "messageId", "messageSeq", "session"):
        assert payload[key] == captured[key]
    # OpenClaw repeats (a selection of) the row's fields at the top level with the same values.
    repeated = (set(captured) & set(row)) - {"session"}
    assert repeated and all(payload[key] == captured[key] for key in repeated)


def test_session_message_repeats_the_row_like_openclaw() -> None:
    row = {"key": "agent:main:main", "sessionId": "s1", "kind": "direct", "status": "idle", "label": None}
    payload = render_session_message(
        session_key="agent:main:main",
        agent_id="main",
        message={"role": "user", "content": "ping"},
        message_id="e4",
        message_seq=3,
        session_row=row,
    )
    assert payload["session"] == row
    assert payload["sessionKey"] == "agent:main:main"
    assert (payload["messageId"], payload["messageSeq"]) == ("e4", 3)
    assert payload["sessionId"] == "s1" and payload["status"] == "idle" and "label" in payload
    assert "key" not in payload


def test_sessions_changed_reason_and_run_phase_variants() -> None:
    row = {"key": "k", "sessionId": "s1", "hasActiveRun": True}
    changed = render_sessions_changed(session_key="k", agent_id="main", ts=5, session_row=row, reason="patch")
    assert changed == {
        "sessionKey": "k",
        "agentId": "main",
        "reason": "patch",
        "ts": 5,
        "session": row,
        "sessionId": "s1",
        "hasActiveRun": True,
    }
    phase = render_sessions_changed(
        session_key="k", agent_id="main", ts=6, session_row=None, phase="model", run_id="r1"
    )
    assert phase == {"sessionKey": "k", "agentId": "main", "phase": "model", "runId": "r1", "ts": 6}


@pytest.mark.parametrize("reason", ["max_duration", "idle_timeout"])
def test_runs_stopped_by_a_time_limit_end_as_aborted(reason: str) -> None:
    # Even when the cut-off reply ended in an error, as `agent.wait` reports the run.
    run = RunStream(run_id="r", session_key="k")
    session = Session(key="k", run_id="r")
    render_compat(session.event(AgentStarted()), run)
    out = render_compat(
        session.event(
            AgentFinished(
                termination_reason=TerminationReason(reason),
                total_turns=1,
                total_tokens=0,
                duration_ms=1,
                stop_reason="error",
                error_message="The run was stopped.",
            )
        ),
        run,
    )
    assert out is not None and out.chat is not None and out.agent is not None
    assert out.chat["state"] == "aborted" and out.chat["errorMessage"] == "The run was stopped."
    assert out.agent["data"]["phase"] == "end" and out.agent["data"]["aborted"] is True
