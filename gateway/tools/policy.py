"""Layer 5: the agent's allow and deny lists, and each tool's required scope.

Patterns are shell-style globs on tool names (`discord_*`). Deny wins over allow; an empty allow
list allows everything. A tool whose metadata names a `scope` is kept only when the session's
granted tool scopes include it (admin implies write implies read).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from fnmatch import fnmatchcase

from agent_core import AgentTool

_IMPLIES = {
    "operator.admin": {"operator.admin", "operator.write", "operator.read"},
    "operator.write": {"operator.write", "operator.read"},
    "operator.read": {"operator.read"},
}


def expand(scopes: Collection[str]) -> set[str]:
    out: set[str] = set()
    for scope in scopes:
        out |= _IMPLIES.get(scope, {scope})
    return out


def policy_layer(
    tools: list[AgentTool],
    *,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    scopes: Collection[str] = ("operator.write",),
) -> list[AgentTool]:
    granted = expand(scopes)
    kept = []
    for tool in tools:
        if any(fnmatchcase(tool.name, pattern) for pattern in deny):
            continue
        if allow and not any(fnmatchcase(tool.name, pattern) for pattern in allow):
            continue
        required = tool.metadata.get("scope")
        if isinstance(required, str) and required not in granted:
            continue
        kept.append(tool)
    return kept
