"""`gateway.commands.chat_commands`: reading `/name args` (what each command does is tested
through `InboundCommands` in test_inbound.py and end to end)."""

from __future__ import annotations

import pytest

from gateway.commands.chat_commands import CHAT_COMMANDS, Slash, parse_slash


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/status", Slash("status", "")),
        ("  /think high  ", Slash("think", "high")),
        ("/think: high", Slash("think", "high")),
        ("/think:high", Slash("think", "high")),
        ("/model openai/gpt-4o\nand more", Slash("model", "openai/gpt-4o\nand more")),
        ("/skill:deploy to staging", Slash("skill:deploy", "to staging")),
        ("/Review.v2 a b", Slash("Review.v2", "a b")),
    ],
)
def test_a_slash_message(text: str, parsed: Slash) -> None:
    assert parse_slash(text) == parsed


@pytest.mark.parametrize("text", ["status", "/", "// comment", "/ status", "/1abc", "path /status", ""])
def test_not_a_slash_message(text: str) -> None:
    assert parse_slash(text) is None


def test_the_skill_a_message_names() -> None:
    assert Slash("skill:deploy", "").skill == "deploy"
    assert Slash("SKILL:deploy", "").skill == "deploy"
    assert Slash("skill:", "").skill is None
    assert Slash("status", "").skill is None


def test_the_commands_openclaw_clients_know() -> None:
    assert set(CHAT_COMMANDS) == {"stop", "new", "reset", "compact", "model", "think", "status"}
    assert [c.name for c in CHAT_COMMANDS.values() if c.accepts_args] == ["new", "reset", "model", "think"]
