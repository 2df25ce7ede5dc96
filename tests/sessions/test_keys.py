"""What a session key says about its session."""

from __future__ import annotations

import pytest

from sessions.keys import agent_from_key, kind_from_key


@pytest.mark.parametrize(
    ("key", "agent"),
    [
        ("agent:main:main", "main"),
        ("agent:ops:discord:channel:1", "ops"),
        ("agent::main", None),
        ("main", None),
    ],
)
def test_the_agent_a_key_names(key: str, agent: str | None) -> None:
    assert agent_from_key(key) == agent


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("agent:main:main", "main"),
        ("agent:main:discord:channel:123", "channel"),
        ("agent:main:slack:channel:C1:thread:1.2", "channel"),
        ("agent:main:telegram:group:9", "group"),
        ("agent:main:discord:direct:42", "direct"),
        ("agent:main:dm:42", "direct"),
        ("agent:main:main:branch:1", "custom"),
        ("something-else", "custom"),
    ],
)
def test_the_kind_of_session_a_key_names(key: str, kind: str) -> None:
    assert kind_from_key(key) == kind
