"""Messages and their JSON: pi's field names, what is written and left out, and the way back."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

import agent_core.events as events_module
import agent_core.llm as llm_module
import agent_core.messages as messages_module
from agent_core import (
    AssistantMessage,
    CustomMessage,
    ImageContent,
    InvalidMessageError,
    MessageUpdateEvent,
    TextContent,
    TextDeltaEvent,
    ThinkingContent,
    ToolCall,
    ToolExecutionEndEvent,
    ToolResultMessage,
    Usage,
    UserMessage,
    parse_message,
    parse_message_json,
    parse_messages,
)
from agent_core._wire import WireStruct
from agent_core.events import AgentToolResultData

ZERO_USAGE = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.0},
}


def test_defaults_are_written_and_unset_optional_fields_left_out() -> None:
    empty = AssistantMessage(api="faux", provider="faux", model="echo", timestamp=1)
    assert empty.dump() == {
        "role": "assistant",
        "content": [],
        "api": "faux",
        "provider": "faux",
        "model": "echo",
        "usage": ZERO_USAGE,
        "stopReason": "stop",
        "timestamp": 1,
    }
    result = ToolResultMessage(tool_call_id="c1", tool_name="read", timestamp=2)
    assert result.dump() == {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "read",
        "content": [],
        "isError": False,
        "timestamp": 2,
    }
    call = ToolCall(id="c1", name="read")
    assert call.dump() == {"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}
    # None inside data is data: only unset fields are left out.
    assert ToolCall(id="c", name="n", arguments={"a": None}).dump()["arguments"] == {"a": None}


def test_every_wire_default_other_than_none_is_always_written() -> None:
    """A plain default (or a bare list/dict factory) would make msgspec leave the field out of
    the JSON whenever it holds that value; pi writes those fields."""
    wire_types = [
        value
        for module in (messages_module, events_module, llm_module)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, WireStruct)
    ]
    assert len(wire_types) > 30
    for cls in wire_types:
        for field in msgspec.structs.fields(cls):
            if field.default is not msgspec.NODEFAULT:
                assert field.default is None, f"{cls.__name__}.{field.name}"
            factory = field.default_factory
            assert factory not in (list, dict, set, tuple, frozenset, bytearray), (
                f"{cls.__name__}.{field.name}"
            )


def test_messages_round_trip_through_their_json_form_and_text() -> None:
    messages = [
        UserMessage(content="hi", timestamp=1),
        UserMessage(
            content=[TextContent(text="look"), ImageContent(data="aGk=", mime_type="image/png")], timestamp=2
        ),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="hmm", thinking_signature="sig"),
                TextContent(text="ok"),
                ToolCall(id="c1", name="read", arguments={"path": "a", "n": [1, 2.5]}),
            ],
            api="anthropic-messages",
            provider="anthropic",
            model="claude",
            usage=Usage(input=3, output=4, total_tokens=7),
            stop_reason="toolUse",
            timestamp=3,
        ),
        ToolResultMessage(
            tool_call_id="c1", tool_name="read", content=[TextContent(text="body")], details={"x": 1}
        ),
        CustomMessage(role="compactionSummary", summary="so far", tokensBefore=10, timestamp=4),
    ]
    for message in messages:
        data = message.dump()
        assert parse_message(data) == message
        assert parse_message_json(json.dumps(data)) == message
        assert parse_message_json(json.dumps(data).encode()) == message
        assert type(parse_message(data)) is type(message)
    assert parse_messages([m.dump() for m in messages]) == messages
    assert parse_message(messages[2]) is messages[2]


def test_fields_pi_does_not_define_are_ignored_on_the_llm_roles_and_kept_on_custom_ones() -> None:
    stored = {"role": "user", "content": "x", "timestamp": 5, "idempotencyKey": "k", "mergedKeys": ["k"]}
    assert parse_message(stored) == UserMessage(content="x", timestamp=5)
    assert parse_message_json(json.dumps(stored)) == UserMessage(content="x", timestamp=5)
    note = parse_message({"role": "note", "text": "t", "level": 3, "gone": None, "timestamp": 9})
    assert isinstance(note, CustomMessage)
    assert (note.role, note.text, note.level, note.timestamp) == ("note", "t", 3, 9)
    assert note.dump() == {"role": "note", "timestamp": 9, "text": "t", "level": 3}
    with pytest.raises(AttributeError, match="no field 'missing'"):
        _ = note.missing


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "assistant", "content": "not a list", "api": "a", "provider": "p", "model": "m"},
        {"role": "toolResult", "toolName": "read"},
        {"role": "user"},
        {"content": "no role"},
        {"role": "note", "timestamp": "soon"},
        ["not", "an", "object"],
    ],
)
def test_invalid_messages_raise_one_clear_error(bad: Any) -> None:
    with pytest.raises(InvalidMessageError):
        parse_message(bad)
    with pytest.raises(ValueError):  # also a ValueError, as before
        parse_message_json(json.dumps(bad))


def test_text_that_is_not_json_is_an_invalid_message() -> None:
    with pytest.raises(InvalidMessageError, match="not valid JSON"):
        parse_message_json("{nope")


def test_a_stored_lone_surrogate_escape_still_reads() -> None:
    text = json.dumps({"role": "user", "content": "half \ud800 pair", "timestamp": 1})
    assert parse_message_json(text) == UserMessage(content="half \ud800 pair", timestamp=1)


def test_events_dump_with_pi_field_names_and_nested_results() -> None:
    partial = AssistantMessage(content=[TextContent(text="h")], api="a", provider="p", model="m", timestamp=1)
    delta = TextDeltaEvent(content_index=0, delta="h", partial=partial)
    update = MessageUpdateEvent(message=partial, assistant_message_event=delta).dump()
    assert update["type"] == "message_update"
    assert update["assistantMessageEvent"] == {
        "type": "text_delta",
        "contentIndex": 0,
        "delta": "h",
        "partial": partial.dump(),
    }
    end = ToolExecutionEndEvent(
        tool_call_id="c1",
        tool_name="read",
        result=AgentToolResultData(content=[TextContent(text="ok")], details={"n": 1}),
        is_error=False,
    )
    assert end.dump() == {
        "type": "tool_execution_end",
        "toolCallId": "c1",
        "toolName": "read",
        "result": {"content": [{"type": "text", "text": "ok"}], "details": {"n": 1}},
        "isError": False,
    }


def test_a_reply_naming_a_known_model_shares_those_strings() -> None:
    text = json.dumps(AssistantMessage(api="faux", provider="faux", model="echo-" + "x" * 20).dump())
    first, second = parse_message_json(text), parse_message_json(text)
    assert isinstance(first, AssistantMessage) and isinstance(second, AssistantMessage)
    assert first.model is second.model and first.api is second.api
