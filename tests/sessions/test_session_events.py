"""Translating agent events into session events (`RunTranslator`), what the event log stores of
them and reading that back (`read_event`, `open_reply`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from agent_core import (
    AgentEndEvent,
    AgentStartEvent,
    AgentToolResult,
    AssistantMessage,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    StopReason,
    TextContent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCall,
    ToolCallDeltaEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    ToolResultMessage,
    TurnEndEvent,
    TurnStartEvent,
    Usage,
    UserMessage,
)
from sessions.event_payloads import (
    AgentFinished,
    AgentStarted,
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
    UnknownPayload,
)
from sessions.records import EventRecord
from sessions.schema import SessionStatus
from sessions.session_events import RunTranslator, SessionEvent, open_reply, read_event
from sessions.termination import TerminationReason


def assistant(text: str = "hi", stop: StopReason = "stop", tokens: int = 0) -> AssistantMessage:
    return AssistantMessage(
        content=[TextContent(text=text)],
        api="a",
        provider="p",
        model="m",
        stop_reason=stop,
        usage=Usage(total_tokens=tokens),
    )


def test_a_message_keeps_one_id_from_start_to_completion() -> None:
    t = RunTranslator()
    partial = assistant("")
    [started] = t.translate(MessageStartEvent(message=partial))
    assert isinstance(started, MessageStarted) and started.role == "assistant"
    message_id = started.message_id
    deltas = [
        t.translate(MessageUpdateEvent(message=partial, assistant_message_event=e))[0]
        for e in (
            TextDeltaEvent(content_index=0, delta="h", partial=partial),
            ThinkingDeltaEvent(content_index=1, delta="t", partial=partial),
            ToolCallDeltaEvent(content_index=2, delta="{", partial=partial),
        )
    ]
    assert deltas == [
        MessageDelta(message_id=message_id, content_index=0, kind="text", delta="h"),
        MessageDelta(message_id=message_id, content_index=1, kind="thinking", delta="t"),
        MessageDelta(message_id=message_id, content_index=2, kind="toolcall", delta="{"),
    ]
    [completed] = t.translate(MessageEndEvent(message=assistant("hi", tokens=7)))
    assert isinstance(completed, MessageCompleted) and completed.message_id == message_id
    assert completed.message["content"] == [{"type": "text", "text": "hi"}]
    # The next message gets a new id.
    [next_start] = t.translate(MessageStartEvent(message=UserMessage(content="q")))
    assert isinstance(next_start, MessageStarted) and next_start.message_id != message_id


def test_turns_tools_and_the_end_of_a_run() -> None:
    t = RunTranslator()
    assert t.translate(AgentStartEvent()) == [AgentStarted()]
    assert t.translate(TurnStartEvent()) == [TurnStarted(turn_index=0)]
    call = ToolCall(id="c1", name="echo", arguments={"text": "x"})
    started = t.translate(ToolExecutionStartEvent(tool_call_id="c1", tool_name="echo", args={"text": "x"}))
    assert started == [ToolStarted(tool_call_id="c1", tool_name="echo", args={"text": "x"})]
    [update] = t.translate(
        ToolExecutionUpdateEvent(
            tool_call_id="c1",
            tool_name="echo",
            args={},
            partial_result=AgentToolResult(content=[TextContent(text="..")]),
        )
    )
    assert isinstance(update, ToolUpdated)
    assert update.partial_result["content"] == [{"type": "text", "text": ".."}]
    [finished] = t.translate(
        ToolExecutionEndEvent(
            tool_call_id="c1",
            tool_name="echo",
            result=AgentToolResult(content=[TextContent(text="x")]),
            is_error=False,
        )
    )
    assert isinstance(finished, ToolFinished)
    assert finished.is_error is False and finished.duration_ms >= 0 and finished.tool_name == "echo"
    result = ToolResultMessage(tool_call_id=call.id, tool_name="echo", content=[TextContent(text="x")])
    turn_end = t.translate(TurnEndEvent(message=assistant(), tool_results=[result]))
    assert turn_end == [TurnFinished(turn_index=0, has_tool_calls=True)]
    t.translate(TurnStartEvent())
    t.translate(MessageStartEvent(message=assistant("")))
    t.translate(MessageEndEvent(message=assistant("done", tokens=12)))
    assert t.translate(AgentEndEvent(messages=[])) == []  # the live session writes agent.finished

    end = t.finished("no_tool_calls")
    assert end.termination_reason is TerminationReason.NO_TOOL_CALLS
    assert (end.total_turns, end.total_tokens, end.stop_reason) == (2, 12, "stop")
    assert end.usage is not None and end.usage["totalTokens"] == 12
    assert end.error_message is None
    assert t.finished("error", error_message="boom").error_message == "boom"


def test_the_end_of_a_run_carries_the_last_replys_error_unless_told_otherwise() -> None:
    t = RunTranslator()
    failed = assistant("", stop="error")
    failed.error_message = "rate limited"
    t.translate(MessageEndEvent(message=failed))
    assert t.finished("error").error_message == "rate limited"
    assert t.finished("error", error_message="the run timed out").error_message == "the run timed out"
    assert "errorMessage" not in RunTranslator().finished("no_tool_calls").dump()
    with pytest.raises(ValueError):
        t.finished("completed")


@dataclass
class Details:
    path: str
    lines: int | None = None


def test_tool_results_of_any_shape_become_json() -> None:
    t = RunTranslator()
    [d] = t.translate(
        ToolExecutionEndEvent(tool_call_id="c", tool_name="t", result={"k": (1, Details("p"))}, is_error=True)
    )
    assert isinstance(d, ToolFinished) and d.result == {"k": [1, {"path": "p"}]}


def test_the_event_log_stores_the_payload_fields_then_the_envelope() -> None:
    delta = MessageDelta(message_id="m1", content_index=0, kind="text", delta="x")
    event = SessionEvent("s1", 4, delta, run_id="r1", session_key="agent:main:main", ts=9)
    assert event.name == "message.delta" and event.droppable
    assert list(event.log_payload().items()) == [
        ("messageId", "m1"),
        ("contentIndex", 0),
        ("kind", "text"),
        ("delta", "x"),
        ("ts", 9),
        ("sessionKey", "agent:main:main"),
    ]
    status = SessionEvent("s1", 5, StatusChanged(SessionStatus.IDLE), ts=10)
    assert not status.droppable
    assert status.log_payload() == {"status": "idle", "ts": 10}  # no key: none is stored


def record_of(event: SessionEvent, created_at: int = 0) -> EventRecord:
    """What the store gives back for `event` (through JSON, as the database holds it)."""
    payload = json.loads(json.dumps(event.log_payload()))
    return EventRecord(event.session_id, event.seq, event.run_id, event.name, payload, created_at)


EVENTS: list[EventPayload] = [
    StatusChanged(SessionStatus.RUNNING),
    AgentStarted(),
    MessageStarted(message_id="m1", role="assistant"),
    MessageDelta(message_id="m1", content_index=0, kind="text", delta="po"),
    MessageCompleted(
        message_id="m1", message={"role": "assistant", "content": [{"type": "text", "text": "po"}]}
    ),
    AgentFinished(
        termination_reason=TerminationReason.NO_TOOL_CALLS, total_turns=1, total_tokens=0, duration_ms=3
    ),
]


@pytest.mark.parametrize("data", EVENTS, ids=lambda d: d.name)
def test_a_stored_event_reads_back_as_the_event_it_was(data: EventPayload) -> None:
    event = SessionEvent("s1", 3, data, run_id="r1", session_key="agent:main:main", ts=1234)
    assert read_event(record_of(event, created_at=99)) == event
    outside = SessionEvent("s1", 4, data, ts=1235)
    assert read_event(record_of(outside)) == outside


def test_a_stored_event_without_a_time_takes_the_rows_and_unknown_ones_keep_their_fields() -> None:
    record = EventRecord("s1", 7, None, "turn.compacted", {"tokensBefore": 10, "sessionKey": "k"}, 555)
    event = read_event(record)
    assert event == SessionEvent(
        "s1", 7, UnknownPayload("turn.compacted", {"tokensBefore": 10}), None, "k", 555
    )
    assert event.log_payload() == {"tokensBefore": 10, "ts": 555, "sessionKey": "k"}


def stored(*events: tuple[str, dict[str, Any]]) -> list[EventRecord]:
    return [EventRecord("s1", seq, "r1", name, payload, 0) for seq, (name, payload) in enumerate(events, 1)]


def test_open_reply_is_the_text_of_the_assistant_message_still_streaming() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "hel"}]}
    done = stored(
        ("message.started", {"role": "assistant", "messageId": "m1", "ts": 1}),
        ("message.delta", {"messageId": "m1", "contentIndex": 0, "kind": "text", "delta": "hel", "ts": 2}),
        ("message.completed", {"messageId": "m1", "message": message, "ts": 3}),
    )
    assert open_reply(done) == ("", None)

    def delta(message_id: str, kind: str, text: str) -> tuple[str, dict[str, Any]]:
        return ("message.delta", {"messageId": message_id, "contentIndex": 0, "kind": kind, "delta": text})

    streaming = [
        *done,
        *stored(
            ("message.started", {"role": "user", "messageId": "u2"}),
            delta("u2", "text", "not a reply"),
            ("message.started", {"role": "assistant", "messageId": "m2"}),
            delta("m2", "thinking", "hmm"),
            delta("m2", "text", "par"),
            delta("m1", "text", "late"),
            delta("m2", "text", "tial"),
        ),
    ]
    assert open_reply(streaming) == ("partial", "m2")
