"""The typed payloads of session events: their JSON form, and reading stored events back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessions.event_payloads import (
    DROPPABLE,
    EVENT_NAMES,
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
    UnknownPayload,
    read_payload,
)
from sessions.schema import SessionStatus
from sessions.termination import TerminationReason

USAGE = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3}
MESSAGE = {"role": "assistant", "content": [{"type": "text", "text": "pong"}], "stopReason": "stop"}

#: One payload of every kind and its JSON form, keys in the order the wire and the log have them.
FORMS: list[tuple[EventPayload, list[tuple[str, Any]]]] = [
    (AgentStarted(), []),
    (TurnStarted(turn_index=2), [("turnIndex", 2)]),
    (MessageStarted(message_id="m1", role="assistant"), [("messageId", "m1"), ("role", "assistant")]),
    (
        MessageDelta(message_id="m1", content_index=1, kind="thinking", delta="hm"),
        [("messageId", "m1"), ("contentIndex", 1), ("kind", "thinking"), ("delta", "hm")],
    ),
    (
        MessageDelta(message_id=None, content_index=0, kind="text", delta="x"),
        [("messageId", None), ("contentIndex", 0), ("kind", "text"), ("delta", "x")],
    ),
    (MessageCompleted(message_id="m1", message=MESSAGE), [("messageId", "m1"), ("message", MESSAGE)]),
    (
        ToolStarted(tool_call_id="c1", tool_name="bash", args={"command": "ls"}),
        [("toolCallId", "c1"), ("toolName", "bash"), ("args", {"command": "ls"})],
    ),
    (
        ToolUpdated(tool_call_id="c1", tool_name="bash", partial_result=None),
        [("toolCallId", "c1"), ("toolName", "bash"), ("partialResult", None)],
    ),
    (
        ToolFinished(
            tool_call_id="c1", tool_name="bash", result={"content": []}, is_error=True, duration_ms=7
        ),
        [
            ("toolCallId", "c1"),
            ("toolName", "bash"),
            ("result", {"content": []}),
            ("isError", True),
            ("durationMs", 7),
        ],
    ),
    (TurnFinished(turn_index=0, has_tool_calls=False), [("turnIndex", 0), ("hasToolCalls", False)]),
    (
        AgentFinished(
            termination_reason=TerminationReason.NO_TOOL_CALLS, total_turns=1, total_tokens=3, duration_ms=40
        ),
        [("terminationReason", "no_tool_calls"), ("totalTurns", 1), ("totalTokens", 3), ("durationMs", 40)],
    ),
    (
        AgentFinished(
            termination_reason=TerminationReason.ABORTED,
            total_turns=1,
            total_tokens=3,
            duration_ms=5,
            stop_reason="aborted",
            usage=USAGE,
            error_message="Request was aborted",
        ),
        [
            ("terminationReason", "aborted"),
            ("totalTurns", 1),
            ("totalTokens", 3),
            ("durationMs", 5),
            ("stopReason", "aborted"),
            ("usage", USAGE),
            ("errorMessage", "Request was aborted"),
        ],
    ),
    (
        ErrorReported(code="provider_error", message="boom", recoverable=False),
        [("code", "provider_error"), ("message", "boom"), ("recoverable", False)],
    ),
    (StatusChanged(SessionStatus.INTERRUPTED), [("status", "interrupted")]),
]


def test_every_event_name_has_exactly_one_payload_type() -> None:
    assert sorted({payload.name for payload, _ in FORMS}) == sorted(EVENT_NAMES)
    assert len(set(EVENT_NAMES)) == len(EVENT_NAMES)
    assert {"message.delta", "tool.updated"} == DROPPABLE


@pytest.mark.parametrize(("payload", "form"), FORMS, ids=lambda v: getattr(v, "name", None))
def test_the_json_form_has_camel_case_keys_in_wire_order(
    payload: EventPayload, form: list[tuple[str, Any]]
) -> None:
    dumped = payload.dump()
    assert list(dumped.items()) == form
    # Plain JSON: enums go out as their values.
    assert json.loads(json.dumps(dumped)) == dict(form)
    assert type(dumped.get("terminationReason", "")) is str and type(dumped.get("status", "")) is str


@pytest.mark.parametrize(("payload", "form"), FORMS, ids=lambda v: getattr(v, "name", None))
def test_reading_the_json_form_back_gives_the_same_payload(
    payload: EventPayload, form: list[tuple[str, Any]]
) -> None:
    fields = json.loads(json.dumps(payload.dump()))
    assert read_payload(payload.name, fields) == payload
    # The envelope fields the event log stores beside them are ignored.
    assert read_payload(payload.name, {**fields, "ts": 5, "sessionKey": "agent:main:main"}) == payload


def test_events_logged_by_earlier_versions_read_back() -> None:
    """Stored payloads exactly as the event log holds them (envelope fields included), among
    them recovery's `agent.finished`, which wrote its fields in another order."""
    stored: list[tuple[str, dict[str, Any]]] = [
        ("agent.started", {"ts": 1002, "sessionKey": "agent:main:main"}),
        ("turn.started", {"turnIndex": 0, "ts": 1003}),
        ("message.delta", {"messageId": None, "contentIndex": 2, "kind": "text", "delta": "!", "ts": 1011}),
        (
            "tool.finished",
            {
                "toolCallId": "c1",
                "toolName": "bash",
                "result": {"content": [{"type": "text", "text": "a\n"}], "details": {"x": 1}},
                "isError": False,
                "durationMs": 7,
                "ts": 1016,
                "sessionKey": "agent:main:main",
            },
        ),
        (
            "agent.finished",
            {
                "terminationReason": "interrupted",
                "stopReason": "aborted",
                "errorMessage": "The gateway stopped",
                "totalTurns": 1,
                "totalTokens": 0,
                "durationMs": 9,
                "ts": 1032,
                "sessionKey": "agent:main:main",
            },
        ),
        ("status.changed", {"status": "idle", "ts": 1019, "sessionKey": "agent:main:main"}),
    ]
    assert [read_payload(name, fields) for name, fields in stored] == [
        AgentStarted(),
        TurnStarted(turn_index=0),
        MessageDelta(message_id=None, content_index=2, kind="text", delta="!"),
        ToolFinished(
            tool_call_id="c1",
            tool_name="bash",
            result={"content": [{"type": "text", "text": "a\n"}], "details": {"x": 1}},
            is_error=False,
            duration_ms=7,
        ),
        AgentFinished(
            termination_reason=TerminationReason.INTERRUPTED,
            total_turns=1,
            total_tokens=0,
            duration_ms=9,
            stop_reason="aborted",
            error_message="The gateway stopped",
        ),
        StatusChanged(SessionStatus.IDLE),
    ]


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("turn.compacted", {"tokensBefore": 10}),  # a name this version does not know
        ("message.delta", {"messageId": "m", "kind": "text", "delta": "x"}),  # a field missing
        ("message.delta", {"messageId": "m", "contentIndex": 0, "kind": "audio", "delta": "x"}),
        ("message.completed", {"messageId": "m", "message": "not an object"}),
        ("status.changed", {"status": "paused"}),
        (
            "agent.finished",
            {"terminationReason": "vanished", "totalTurns": 0, "totalTokens": 0, "durationMs": 0},
        ),
    ],
)
def test_a_stored_event_that_does_not_fit_its_type_is_kept_as_stored(
    name: str, fields: dict[str, Any]
) -> None:
    payload = read_payload(name, fields)
    assert payload == UnknownPayload(name, fields)
    assert payload.name == name and payload.dump() == fields
    assert payload.dump() is not fields  # callers may add to it without touching the payload
