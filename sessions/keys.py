"""What a session key says about its session.

A key (`agent:main:main`, `agent:main:discord:channel:123`) names a conversation; PROTOCOL.md
gives the grammar. `agent:<id>:...` names the agent; the words after it say what kind of
conversation it is. Keys outside the grammar are allowed: they belong to no agent in particular
and make `custom` sessions.
"""

from __future__ import annotations

from sessions.schema import SessionKind

__all__ = ["agent_from_key", "kind_from_key"]


def agent_from_key(key: str) -> str | None:
    """The agent `agent:<id>:...` names; None for a key outside the grammar."""
    parts = key.split(":")
    if len(parts) >= 3 and parts[0] == "agent" and parts[1]:
        return parts[1]
    return None


def kind_from_key(key: str) -> SessionKind:
    """The kind of session a key names: `main` for `agent:<id>:main`, `channel` for a channel or
    thread, `group`, `direct` (a DM), else `custom`."""
    parts = key.split(":")
    if len(parts) >= 3 and parts[0] == "agent":
        rest = parts[2:]
        if rest == ["main"]:
            return SessionKind.MAIN
        if "thread" in rest or "channel" in rest:
            return SessionKind.CHANNEL
        if "group" in rest:
            return SessionKind.GROUP
        if "direct" in rest or "dm" in rest:
            return SessionKind.DIRECT
    return SessionKind.CUSTOM
