"""Accepted inputs as the messages the agent receives, and the keys they carry."""

from __future__ import annotations

import copy

from agent_core import AssistantMessage, TextContent, UserMessage, parse_message
from sessions.input_message import InputMessage, as_input, input_keys_of, merge_inputs


def test_an_input_carries_its_key_as_a_field_and_on_the_wire() -> None:
    message = as_input("hello", "k1")
    assert message.idempotency_key == "k1" and message.input_keys == ["k1"]
    dumped = message.dump()
    assert dumped["idempotencyKey"] == "k1" and "mergedKeys" not in dumped
    assert dumped["content"] == [{"type": "text", "text": "hello"}]


def test_a_user_message_keeps_its_content_and_timestamp_and_takes_the_new_key() -> None:
    sent = parse_message(
        {"role": "user", "content": "x", "timestamp": 5, "idempotencyKey": "old", "mergedKeys": ["a"]}
    )
    message = as_input(sent, "k2")
    assert message.dump() == {"role": "user", "content": "x", "timestamp": 5, "idempotencyKey": "k2"}
    assert message.input_keys == ["k2"]


def test_another_message_becomes_its_text() -> None:
    reply = AssistantMessage(content=[TextContent(text="from elsewhere")], api="a", provider="p", model="m")
    assert as_input(reply, "k3").content == [TextContent(text="from elsewhere")]


def test_merged_inputs_carry_every_key_in_order() -> None:
    merged = merge_inputs([as_input("one", "a"), as_input("two", "b"), as_input("three", "c")])
    assert merged.input_keys == ["a", "b", "c"]
    assert merged.dump()["idempotencyKey"] == "a" and merged.dump()["mergedKeys"] == ["a", "b", "c"]
    assert merged.content == [TextContent(text="one\n\ntwo\n\nthree")]
    single = as_input("alone", "z")
    assert merge_inputs([single]) is single


def test_the_keys_survive_a_copy_and_only_inputs_have_any() -> None:
    message = as_input("hello", "k1")
    assert input_keys_of(copy.copy(message)) == ["k1"]
    assert isinstance(parse_message(message), InputMessage)
    assert input_keys_of(UserMessage(content="plain")) == []
    assert input_keys_of(parse_message(message.dump())) == []  # read back from storage: just a message
