"""Which tool calls wait for a person: an agent's approval policy and the rule that asks.

`approvals = "never"` (the default) asks about nothing; `"always"` about every tool call;
`"risky"` about a call that meets one of the agent's rules, checked in this order:

1. the tool is in `approval_tools`;
2. a tool of an MCP server in `approval_mcp_servers` (tools named `<server>__<tool>`; `"*"`
   names every server);
3. `bash` with a command that exec mediation classifies at `ask_threshold` or above;
4. with `approval_outside_workspace`, a file tool whose `path` resolves outside the workspace,
   or a command with an absolute (or `~`) path argument outside it.

A command at or above the sandbox's `deny_threshold` is never asked about: the sandbox refuses
it outright (so `critical` commands stay refused whatever a person would say). A decision never
widens the sandbox: an approved call still runs confined.

`assess` returns an `Ask` (why, how risky, and the call's shape) or None.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_core.tools import FILE_TOOL_NAMES
from gateway.approvals.shape import command_shape
from gateway.sandbox.errors import PathOutsideWorkspaceError
from gateway.sandbox.exec_mediation import Classification, classify
from gateway.sandbox.paths import resolve_in_workspace
from gateway.sandbox.risk import RiskTier
from gateway.sandbox.shell_syntax import read_script

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

DEFAULT_TIMEOUT_S = 600.0
_HARMLESS_PATHS = frozenset({"/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty"})


@dataclass(frozen=True, kw_only=True)
class ApprovalPolicy:
    mode: str = "never"
    tools: frozenset[str] = frozenset()
    ask_threshold: RiskTier | None = RiskTier.MEDIUM
    outside_workspace: bool = True
    mcp_servers: frozenset[str] = frozenset()
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def active(self) -> bool:
        return self.mode != "never"


@dataclass(frozen=True, kw_only=True)
class Ask:
    """Why a call waits for a decision, and what the person sees of it."""

    rule: str
    shape: str
    """What an allow-always decision covers: the tool and, for `bash`, the command's shape."""
    risk: RiskTier = RiskTier.NONE
    classes: list[str] = field(default_factory=list)
    risk_reason: str = ""
    command: str | None = None


def policy_for(config: GatewayConfig, agent_id: str) -> ApprovalPolicy:
    """The approval policy of `agent_id` (`never` for an unknown agent)."""
    agent = next((a for a in config.agents if a.id == agent_id), None)
    if agent is None:
        return ApprovalPolicy()
    return ApprovalPolicy(
        mode=agent.approvals,
        tools=frozenset(agent.approval_tools),
        ask_threshold=RiskTier.parse(agent.ask_threshold) if agent.ask_threshold is not None else None,
        outside_workspace=agent.approval_outside_workspace,
        mcp_servers=frozenset(agent.approval_mcp_servers),
        timeout_s=agent.approval_timeout_s,
    )


def assess(
    policy: ApprovalPolicy,
    tool_name: str,
    params: Any,
    *,
    workspace: Path,
    deny_threshold: RiskTier | None,
) -> Ask | None:
    """The reason `tool_name(params)` must wait for a decision, or None when it runs unasked.
    Classifies a `bash` command (call it off the event loop)."""
    if not policy.active:
        return None
    args = params if isinstance(params, Mapping) else {}
    command = args.get("command") if tool_name == "bash" else None
    classification = classify(command) if isinstance(command, str) else Classification(RiskTier.NONE)
    if deny_threshold is not None and classification.risk >= deny_threshold:
        return None  # the sandbox refuses it outright
    shape = f"bash: {command_shape(command)}" if isinstance(command, str) else tool_name

    def ask(rule: str) -> Ask:
        return Ask(
            rule=rule,
            shape=shape,
            risk=classification.risk,
            classes=list(classification.classes),
            risk_reason=classification.reason,
            command=command if isinstance(command, str) else None,
        )

    if policy.mode == "always":
        return ask('approvals = "always"')
    if tool_name in policy.tools:
        return ask(f"tool {tool_name} is in approval_tools")
    server, sep, _ = tool_name.partition("__")
    if sep and server and ("*" in policy.mcp_servers or server in policy.mcp_servers):
        return ask(f"a tool of MCP server {server} (approval_mcp_servers)")
    threshold = policy.ask_threshold
    if threshold is not None and classification.risk >= threshold and classification.risk > RiskTier.NONE:
        return ask(f"risk {classification.risk.label} is at or above ask_threshold {threshold.label}")
    if policy.outside_workspace:
        outside = _outside_path(tool_name, args, command, workspace)
        if outside is not None:
            return ask(f"path {outside} is outside the workspace")
    return None


def _outside_path(tool_name: str, args: Mapping[str, Any], command: Any, workspace: Path) -> str | None:
    if tool_name in FILE_TOOL_NAMES:
        raw = args.get("path")
        if not isinstance(raw, str) or not raw.strip():
            return None
        try:
            resolve_in_workspace(workspace, raw)
        except PathOutsideWorkspaceError:
            return raw
        return None
    if isinstance(command, str):
        return _outside_in_command(command, workspace)
    return None


def _outside_in_command(command: str, workspace: Path) -> str | None:
    root = os.path.realpath(workspace)
    for found in read_script(command).commands:
        words = [word.text for word in found.words[1:]]
        words += [r.target.text for r in found.redirects if r.target is not None]
        for word in words:
            candidate = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
            if not candidate.startswith(("/", "~")) or candidate in _HARMLESS_PATHS:
                continue
            if candidate.startswith("~"):
                return candidate
            normal = posixpath.normpath(candidate)
            if normal != root and not normal.startswith(root.rstrip("/") + "/"):
                return candidate
    return None


def describe(ask: Ask, args: Any) -> dict[str, Any]:
    """The request's detail as stored and shown (`ApprovalRequest.detail`)."""
    try:
        shown = json.loads(json.dumps(args, default=str))
    except (TypeError, ValueError):
        shown = str(args)
    return {
        "args": shown,
        "command": ask.command,
        "risk": ask.risk.label,
        "classes": ask.classes,
        "riskReason": ask.risk_reason,
        "rule": ask.rule,
        "shape": ask.shape,
    }
