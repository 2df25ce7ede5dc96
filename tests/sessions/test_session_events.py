"""Translating agent events into session events (`RunTranslator`) and their wire payloads."""

from __future__ import annotations

from dataclasses import dataclass

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
from sessions.session_events import DROPPABLE, EVENT_NAMES, RunTranslator, SessionEvent


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
    message_id = started.data["messageId"]
    assert started.name == "message.started" and started.data["role"] == "assistant"
    deltas = [
        t.translate(MessageUpdateEvent(message=partial, assistant_message_event=e))[0]
        for e in (
            TextDeltaEvent(content_index=0, delta="h", partial=partial),
            ThinkingDeltaEvent(content_index=1, delta="t", partial=partial),
            ToolCallDeltaEvent(content_index=2, delta="{", partial=partial),
        )
    ]
    assert [(d.name, d.data["kind"], d.data["messageId"]) for d in deltas] == [
        ("message.delta", "text", message_id),
        ("message.delta", "thinking", message_id),
        ("message.delta", "toolcall", message_id),
    ]
    [completed] = t.translate(MessageEndEvent(message=assistant("hi", tokens=7)))
    assert completed.name == "message.completed" and completed.data["messageId"] == message_id
    assert completed.data["message"]["content"] == [{"type": "text", "text": "hi"}]
    # The next message gets a new id.
    [next_start] = t.translate(MessageStartEvent(message=UserMessage(content="q")))
    assert next_start.data["messageId"] != message_id


def test_turns_tools_and_the_end_of_a_run() -> None:
    t = RunTranslator()
    assert [d.name for d in t.translate(AgentStartEvent())] == ["agent.started"]
    assert t.translate(TurnStartEvent())[0].data == {"turnIndex": 0}
    call = ToolCall(id="c1", name="echo", arguments={"text": "x"})
    started = t.translate(ToolExecutionStartEvent(tool_call_id="c1", tool_name="echo", args={"text": "x"}))
    assert started[0].data == {"toolCallId": "c1", "toolName": "echo", "args": {"text": "x"}}
    update = t.translate(
        ToolExecutionUpdateEvent(
            tool_call_id="c1",
            tool_name="echo",
            args={},
            partial_result=AgentToolResult(content=[TextContent(text="..")]),
        )
    )
    assert update[0].data["partialResult"]["content"] == [{"type": "text", "text": ".."}]
    [finished] = t.translate(
        ToolExecutionEndEvent(
            tool_call_id="c1",
            tool_name="echo",
            result=AgentToolResult(content=[TextContent(text="x")]),
            is_error=False,
        )
    )
    assert finished.data["isError"] is False and finished.data["durationMs"] >= 0
    result = ToolResultMessage(tool_call_id=call.id, tool_name="echo", content=[TextContent(text="x")])
    turn_end = t.translate(TurnEndEvent(message=assistant(), tool_results=[result]))
    assert turn_end[0].data == {"turnIndex": 0, "hasToolCalls": True}
    t.translate(TurnStartEvent())
    t.translate(MessageStartEvent(message=assistant("")))
    t.translate(MessageEndEvent(message=assistant("done", tokens=12)))
    assert t.translate(AgentEndEvent(messages=[])) == []  # the live session writes agent.finished

    data = t.finished("no_tool_calls").data
    assert data["terminationReason"] == "no_tool_calls"
    assert data["totalTurns"] == 2 and data["totalTokens"] == 12 and data["stopReason"] == "stop"
    assert t.finished("error", error_message="boom").data["errorMessage"] == "boom"


@dataclass
class Details:
    path: str
    lines: int | None = None


def test_tool_results_of_any_shape_become_json() -> None:
    t = RunTranslator()
    [d] = t.translate(
        ToolExecutionEndEvent(tool_call_id="c", tool_name="t", result={"k": (1, Details("p"))}, is_error=True)
    )
    assert d.data["result"] == {"k": [1, {"path": "p"}]}


def test_the_wire_payload_and_droppable_events() -> None:
    e = SessionEvent(
        "s1", 4, "message.delta", {"delta": "x"}, run_id="r1", session_key="agent:main:main", ts=9
    )
    assert e.payload() == {
        "sessionId": "s1",
        "sessionKey": "agent:main:main",
        "sessionSeq": 4,
        "runId": "r1",
        "ts": 9,
        "delta": "x",
    }
    assert e.droppable
    assert not SessionEvent("s1", 5, "message.completed", {}).droppable
    assert set(EVENT_NAMES) >= DROPPABLE


def test_open_reply_is_the_text_of_the_assistant_message_still_streaming() -> None:
    from types import SimpleNamespace

    from sessions.session_events import open_reply

    def ev(type_: str, **payload: object) -> SimpleNamespace:
        return SimpleNamespace(type=type_, payload=payload)

    done = [
        ev("message.started", role="assistant", messageId="m1"),
        ev("message.delta", messageId="m1", kind="text", delta="hel"),
        ev("message.completed", messageId="m1"),
    ]
    assert open_reply(done) == ("", None)
    streaming = [
        *done,
        ev("message.started", role="user", messageId="u2"),
        ev("message.started", role="assistant", messageId="m2"),
        ev("message.delta", messageId="m2", kind="thinking", delta="hmm"),
        ev("message.delta", messageId="m2", kind="text", delta="par"),
        ev("message.delta", messageId="m2", kind="text", delta="tial"),
    ]
    assert open_reply(streaming) == ("partial", "m2")
