from __future__ import annotations

import json

import pytest

from gateway.protocol.events import (
    AgentFinished,
    AgentStarted,
    EventData,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionError,
    SessionEvent,
    StatusChanged,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFinished,
    TurnStarted,
    render_native,
    render_native_record,
    render_snapshot,
)
from tests.gateway.protocol._session import SESSION_ID, Session

ALL_KINDS: list[EventData] = [
    AgentStarted(),
    TurnStarted(turn_index=0),
    MessageStarted(message_id="m1"),
    MessageDelta(message_id="m1", content_index=0, delta_kind="text", delta="po", text="po"),
    MessageDelta(message_id="m1", content_index=1, delta_kind="thinking", delta="hmm"),
    MessageDelta(message_id="m1", content_index=2, delta_kind="toolcall", delta='{"pa'),
    ToolStarted(tool_call_id="t1", tool_name="read", args={"path": "a.txt"}),
    ToolUpdated(tool_call_id="t1", tool_name="read", partial={"content": []}),
    ToolFinished(
        tool_call_id="t1",
        tool_name="read",
        result={"content": [{"type": "text", "text": "x"}]},
        is_error=False,
        duration_ms=12,
    ),
    MessageCompleted(
        message_id="m1", message={"role": "assistant", "content": [{"type": "text", "text": "pong"}]}
    ),
    TurnFinished(has_tool_calls=True, turn_index=0),
    AgentFinished(
        termination_reason="completed", total_turns=2, total_tokens=345, duration_ms=900, stop_reason="stop"
    ),
    SessionError(code="provider_error", message="boom", recoverable=False),
    StatusChanged(status="idle"),
]


# --- native -----------------------------------------------------------------------------------


def test_native_names_are_the_protocol_ones() -> None:
    session = Session()
    names = [render_native(session.event(data))[0] for data in ALL_KINDS]
    assert names == [
        "session.agent.started",
        "session.turn.started",
        "session.message.started",
        "session.message.delta",
        "session.message.delta",
        "session.message.delta",
        "session.tool.started",
        "session.tool.updated",
        "session.tool.finished",
        "session.message.completed",
        "session.turn.finished",
        "session.agent.finished",
        "session.error",
        "session.status.changed",
    ]


def test_native_payloads_carry_the_envelope_and_camel_case_fields() -> None:
    session = Session()
    payloads = [render_native(session.event(data))[1] for data in ALL_KINDS]
    for seq, payload in enumerate(payloads, start=1):
        assert payload["sessionId"] == SESSION_ID
        assert payload["sessionKey"] == "agent:main:main"
        assert payload["sessionSeq"] == seq
        assert payload["runId"] == "run-1"
        assert payload["ts"] == 1000
    assert payloads[3] == {
        "sessionId": SESSION_ID,
        "sessionKey": "agent:main:main",
        "sessionSeq": 4,
        "runId": "run-1",
        "ts": 1000,
        "messageId": "m1",
        "contentIndex": 0,
        "kind": "text",
        "delta": "po",
    }
    assert (
        payloads[8]["isError"] is False and payloads[8]["durationMs"] == 12 and payloads[8]["name"] == "read"
    )
    assert payloads[9]["message"]["role"] == "assistant"
    assert payloads[10]["hasToolCalls"] is True
    finished = payloads[11]
    assert (
        finished["terminationReason"],
        finished["totalTurns"],
        finished["totalTokens"],
        finished["durationMs"],
    ) == (
        "completed",
        2,
        345,
        900,
    )
    assert "usage" not in finished and "errorMessage" not in finished
    assert payloads[12].items() >= {"code": "provider_error", "message": "boom", "recoverable": False}.items()
    assert payloads[13]["status"] == "idle"


def test_events_outside_a_run_have_no_run_id() -> None:
    _, payload = render_native(Session(run_id=None).event(StatusChanged(status="running")))
    assert "runId" not in payload


def test_records_survive_json_and_render_identically() -> None:
    session = Session()
    for data in ALL_KINDS:
        event = session.event(data)
        record = json.loads(json.dumps(event.to_record()))
        assert render_native_record(record) == render_native(event)
        rebuilt = SessionEvent.from_record(record)
        assert rebuilt.kind == event.kind
        assert render_native(rebuilt) == render_native(event)


def test_from_record_refuses_unknown_names() -> None:
    record = Session().event(AgentStarted()).to_record()
    record["name"] = "mystery"
    with pytest.raises(ValueError, match="mystery"):
        SessionEvent.from_record(record)


def test_snapshot() -> None:
    name, payload = render_snapshot(
        session_id="s",
        session_key="k",
        session_seq=9,
        messages=[{"role": "user", "content": "hi"}],
        partial=None,
    )
    assert name == "session.snapshot"
    assert payload == {
        "sessionId": "s",
        "sessionKey": "k",
        "sessionSeq": 9,
        "messages": [{"role": "user", "content": "hi"}],
        "partial": None,
    }
