from __future__ import annotations

import json

from gateway.protocol.events import EventRenderer, committed_message, native
from sessions import (
    AgentFinished,
    AgentStarted,
    ErrorReported,
    EventPayload,
    EventRecord,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    StatusChanged,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFinished,
    TurnStarted,
    read_event,
)
from sessions.schema import SessionStatus
from sessions.termination import TerminationReason
from tests.gateway.protocol._session import SESSION_ID, Session

REPLY = {"role": "assistant", "content": [{"type": "text", "text": "pong"}]}

ALL_KINDS: list[EventPayload] = [
    AgentStarted(),
    TurnStarted(turn_index=0),
    MessageStarted(message_id="m1", role="assistant"),
    MessageDelta(message_id="m1", content_index=0, kind="text", delta="po"),
    MessageDelta(message_id="m1", content_index=1, kind="thinking", delta="hmm"),
    MessageDelta(message_id="m1", content_index=2, kind="toolcall", delta='{"pa'),
    ToolStarted(tool_call_id="t1", tool_name="read", args={"path": "a.txt"}),
    ToolUpdated(tool_call_id="t1", tool_name="read", partial_result={"content": []}),
    ToolFinished(
        tool_call_id="t1",
        tool_name="read",
        result={"content": [{"type": "text", "text": "x"}]},
        is_error=False,
        duration_ms=12,
    ),
    MessageCompleted(message_id="m1", message=REPLY),
    TurnFinished(turn_index=0, has_tool_calls=True),
    AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS,
        total_turns=2,
        total_tokens=345,
        duration_ms=900,
        stop_reason="stop",
    ),
    ErrorReported(code="provider_error", message="boom", recoverable=False),
    StatusChanged(SessionStatus.IDLE),
]


# --- native -----------------------------------------------------------------------------------


def test_native_names_are_the_protocol_ones() -> None:
    session = Session()
    names = [native(session.event(data))[0] for data in ALL_KINDS]
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


def test_native_payloads_carry_the_envelope_then_the_camel_case_fields() -> None:
    session = Session()
    payloads = [native(session.event(data))[1] for data in ALL_KINDS]
    for seq, payload in enumerate(payloads, start=1):
        assert list(payload)[:5] == ["sessionId", "sessionKey", "sessionSeq", "runId", "ts"]
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
    assert payloads[7]["partialResult"] == {"content": []} and payloads[7]["toolName"] == "read"
    assert (payloads[8]["isError"], payloads[8]["durationMs"], payloads[8]["toolName"]) == (False, 12, "read")
    assert payloads[9]["message"] == REPLY
    assert payloads[10]["hasToolCalls"] is True
    finished = payloads[11]
    assert (
        finished["terminationReason"],
        finished["totalTurns"],
        finished["totalTokens"],
        finished["durationMs"],
        finished["stopReason"],
    ) == ("no_tool_calls", 2, 345, 900, "stop")
    assert "usage" not in finished and "errorMessage" not in finished
    assert payloads[12].items() >= {"code": "provider_error", "message": "boom", "recoverable": False}.items()
    assert payloads[13]["status"] == "idle"


def test_events_outside_a_run_have_no_run_id() -> None:
    _, payload = native(Session(run_id=None).event(StatusChanged(SessionStatus.RUNNING)))
    assert "runId" not in payload
    assert payload["status"] == "running"


def test_a_stored_event_renders_exactly_as_it_did_live() -> None:
    session = Session()
    for data in ALL_KINDS:
        event = session.event(data)
        stored = json.loads(json.dumps(event.log_payload()))
        record = EventRecord(event.session_id, event.seq, event.run_id, event.name, stored, created_at=0)
        live = json.dumps(native(event))
        assert json.dumps(native(read_event(record))) == live


def test_committed_messages_also_go_out_as_session_message() -> None:
    session = Session()
    completed = session.event(MessageCompleted(message_id="m1", message=REPLY))
    assert committed_message(completed) == {
        "sessionKey": "agent:main:main",
        "sessionId": SESSION_ID,
        "messageId": "m1",
        "messageSeq": 1,
        "message": REPLY,
    }
    assert committed_message(session.event(MessageStarted(message_id="m2", role="assistant"))) is None


# --- every shape at once ----------------------------------------------------------------------


def test_the_renderer_gives_every_shape_of_an_event() -> None:
    renderer = EventRenderer()
    session = Session()
    started = renderer.render(session.event(AgentStarted()))
    assert (started.name, started.payload) == native(Session().event(AgentStarted()))
    assert started.message is None and not started.droppable
    assert started.openclaw is not None and started.openclaw.agent is not None
    assert started.openclaw.agent["stream"] == "lifecycle" and started.openclaw.agent["agentId"] == "main"

    renderer.render(session.event(MessageStarted(message_id="m1", role="assistant")))
    delta = renderer.render(
        session.event(MessageDelta(message_id="m1", content_index=0, kind="text", delta="p"))
    )
    assert delta.droppable and delta.openclaw is not None and delta.openclaw.droppable
    completed = renderer.render(session.event(MessageCompleted(message_id="m1", message=REPLY)))
    assert completed.message is not None and completed.message["messageSeq"] == 4
    assert completed.openclaw is None


def test_a_runs_openclaw_stream_lives_from_its_first_event_to_agent_finished() -> None:
    renderer = EventRenderer()
    session = Session()
    finished = AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS, total_turns=1, total_tokens=0, duration_ms=1
    )
    # The session turns running before the run starts and idle after it ended: neither opens a
    # stream, so nothing is left behind once the run is over.
    assert renderer.render(session.event(StatusChanged(SessionStatus.RUNNING))).openclaw is None
    assert renderer.open_runs == 0
    renderer.render(session.event(AgentStarted()))
    assert renderer.open_runs == 1
    end = renderer.render(session.event(finished))
    assert end.openclaw is not None and end.openclaw.chat is not None
    assert end.openclaw.chat["state"] == "final"
    assert renderer.open_runs == 0
    assert renderer.render(session.event(StatusChanged(SessionStatus.IDLE))).openclaw is None
    assert renderer.open_runs == 0


def test_runs_are_numbered_separately() -> None:
    renderer = EventRenderer()
    first, second = Session(run_id="r1"), Session(run_id="r2")
    seqs = []
    for session in (first, second, first, second):
        rendered = renderer.render(session.event(ToolStarted(tool_call_id="t", tool_name="ls", args={})))
        assert rendered.openclaw is not None and rendered.openclaw.tool
        assert rendered.openclaw.agent is not None
        seqs.append((rendered.openclaw.agent["runId"], rendered.openclaw.agent["seq"]))
    assert seqs == [("r1", 1), ("r2", 1), ("r1", 2), ("r2", 2)]
