from __future__ import annotations

import itertools
import json

from gateway.protocol.compat import CompatPayloads
from gateway.protocol.delta_pacing import DeltaPacing
from gateway.protocol.events import EventRenderer, committed_message, native, native_json
from gateway.protocol.frames import dumps
from sessions import (
    AgentFinished,
    AgentStarted,
    ErrorReported,
    EventPayload,
    EventRecord,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    SessionEvent,
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


def test_native_json_is_the_native_payload_serialised() -> None:
    """The native frame is built around the payload's own JSON text, byte for byte what
    serialising the native payload gives, with or without a run, key and non-ASCII text."""
    cases = [Session(), Session(run_id=None), Session(key="agent:main:ünï")]
    for session in cases:
        for data in [
            *ALL_KINDS,
            MessageDelta(message_id="m", content_index=0, kind="text", delta="é \u2028"),
        ]:
            event = session.event(data)
            assert native_json(event) == dumps(native(event)[1])
    keyless = SessionEvent(SESSION_ID, 1, AgentStarted(), run_id=None, session_key=None, ts=5)
    assert json.loads(native_json(keyless)) == native(keyless)[1]


# --- OpenClaw frames, paced ---------------------------------------------------------------------


def text_delta(text: str) -> MessageDelta:
    return MessageDelta(message_id="m1", content_index=0, kind="text", delta=text)


def deltas(rendered: tuple[CompatPayloads, ...]) -> list[str]:
    return [
        p.agent["data"]["delta"] for p in rendered if p.agent is not None and p.agent["stream"] == "assistant"
    ]


def test_the_renderer_gives_openclaw_frames_for_run_events_only() -> None:
    renderer = EventRenderer()
    session = Session()
    started = renderer.compat(session.event(AgentStarted()), now=0.0)
    assert len(started) == 1 and started[0].agent is not None
    assert started[0].agent["stream"] == "lifecycle" and started[0].agent["agentId"] == "main"
    assert renderer.compat(session.event(MessageStarted(message_id="m1", role="assistant")), now=0.0) == ()
    delta = renderer.compat(session.event(text_delta("p")), now=0.0)
    assert len(delta) == 1 and delta[0].droppable
    assert renderer.compat(session.event(MessageCompleted(message_id="m1", message=REPLY)), now=0.0) == ()


def test_text_deltas_are_held_for_the_interval_and_go_out_whole_and_in_order() -> None:
    renderer = EventRenderer(DeltaPacing(interval_s=0.075, stretch=0.0))
    session = Session()
    renderer.compat(session.event(AgentStarted()), now=0.0)
    renderer.compat(session.event(MessageStarted(message_id="m1", role="assistant")), now=0.0)
    assert deltas(renderer.compat(session.event(text_delta("a ")), now=0.0)) == ["a "]
    assert renderer.compat(session.event(text_delta("b ")), now=0.02) == ()
    assert renderer.compat(session.event(text_delta("c ")), now=0.05) == ()
    assert renderer.next_deadline() == 0.075
    # Due: the next delta carries everything held.
    out = renderer.compat(session.event(text_delta("d ")), now=0.08)
    assert deltas(out) == ["b c d "]
    assert out[0].agent is not None and out[0].agent["data"]["text"] == "a b c d "
    assert out[0].chat is not None and out[0].chat["message"]["content"][0]["text"] == "a b c d "
    assert renderer.next_deadline() is None
    # A pause: the timer's flush sends what is held once it is due, not before.
    assert renderer.compat(session.event(text_delta("e")), now=0.1) == ()
    assert renderer.flush_due(0.15) == []
    flushed = renderer.flush_due(0.16)
    assert [(f.session_id, deltas(f.payloads)) for f in flushed] == [(SESSION_ID, ["e"])]
    assert renderer.next_deadline() is None and renderer.flush_due(10.0) == []


def test_a_held_delta_goes_out_before_the_runs_next_frame_and_the_final_has_the_whole_text() -> None:
    renderer = EventRenderer(DeltaPacing(interval_s=0.075, stretch=0.0))
    session = Session()
    renderer.compat(session.event(AgentStarted()), now=0.0)
    renderer.compat(session.event(MessageStarted(message_id="m1", role="assistant")), now=0.0)
    renderer.compat(session.event(text_delta("po")), now=0.0)
    renderer.compat(session.event(text_delta("ng")), now=0.01)
    completed = renderer.compat(session.event(MessageCompleted(message_id="m1", message=REPLY)), now=0.02)
    assert deltas(completed) == ["ng"]
    finished = AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS, total_turns=1, total_tokens=0, duration_ms=1
    )
    end = renderer.compat(session.event(finished), now=0.03)
    assert [p.agent["data"]["phase"] for p in end if p.agent is not None] == ["end"]
    assert end[-1].chat is not None and end[-1].chat["message"]["content"][0]["text"] == "pong"
    seqs = [p.agent["seq"] for p in (*completed, *end) if p.agent is not None]
    assert seqs == sorted(seqs)


def test_the_spacing_stretches_with_the_age_of_the_message() -> None:
    pacing = DeltaPacing(interval_s=0.075, stretch=0.01)
    renderer = EventRenderer(pacing)
    session = Session()
    renderer.compat(session.event(MessageStarted(message_id="m1", role="assistant")), now=0.0)
    sent_at = []
    now = 0.0
    while now < 80.0:  # 4,000 words at 50 a second
        if renderer.compat(session.event(text_delta("w ")), now=now):
            sent_at.append(now)
        now += 0.02
    gaps = [b - a for a, b in itertools.pairwise(sent_at)]
    assert min(gaps) >= 0.075 - 1e-9
    assert gaps[-1] >= 0.75  # 1% of the 80 s the message has streamed
    assert len(sent_at) < 400  # against 4,000 deltas unpaced


def test_nothing_is_rendered_or_held_when_nobody_takes_openclaw_frames() -> None:
    renderer = EventRenderer(DeltaPacing(interval_s=0.075))
    session = Session()
    assert renderer.compat(session.event(AgentStarted()), now=0.0, taken=False) == ()
    renderer.compat(session.event(MessageStarted(message_id="m1", role="assistant")), now=0.0, taken=False)
    assert renderer.compat(session.event(text_delta("a ")), now=0.0, taken=False) == ()
    assert renderer.compat(session.event(text_delta("b ")), now=0.01, taken=False) == ()
    assert renderer.next_deadline() is None
    # A taker arrives mid-stream: the next delta carries only what streamed since, the text all.
    out = renderer.compat(session.event(text_delta("c")), now=0.02)
    assert out[0].agent is not None and out[0].agent["data"] == {"text": "a b c", "delta": "c"}


def test_a_runs_openclaw_stream_lives_from_its_first_event_to_agent_finished() -> None:
    renderer = EventRenderer()
    session = Session()
    finished = AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS, total_turns=1, total_tokens=0, duration_ms=1
    )
    # The session turns running before the run starts and idle after it ended: neither opens a
    # stream, so nothing is left behind once the run is over.
    assert renderer.compat(session.event(StatusChanged(SessionStatus.RUNNING)), now=0.0) == ()
    assert renderer.open_runs == 0
    renderer.compat(session.event(AgentStarted()), now=0.0)
    assert renderer.open_runs == 1
    end = renderer.compat(session.event(finished), now=0.0)
    assert end[-1].chat is not None and end[-1].chat["state"] == "final"
    assert renderer.open_runs == 0
    assert renderer.compat(session.event(StatusChanged(SessionStatus.IDLE)), now=0.0) == ()
    assert renderer.open_runs == 0


def test_runs_are_numbered_separately() -> None:
    renderer = EventRenderer()
    first, second = Session(run_id="r1"), Session(run_id="r2")
    seqs = []
    for session in (first, second, first, second):
        rendered = renderer.compat(
            session.event(ToolStarted(tool_call_id="t", tool_name="ls", args={})), now=0.0
        )
        assert len(rendered) == 1 and rendered[0].tool and rendered[0].agent is not None
        seqs.append((rendered[0].agent["runId"], rendered[0].agent["seq"]))
    assert seqs == [("r1", 1), ("r2", 1), ("r1", 2), ("r2", 2)]
