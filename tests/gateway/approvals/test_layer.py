"""`gateway.approvals.layer`: a call the policy asks about waits, runs when allowed, and fails
with a refusal the model can read otherwise; calls the policy does not ask about never wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_core import AgentTool, AgentToolResult, TextContent
from gateway.approvals import (
    ApprovalDenied,
    ApprovalGate,
    ApprovalPolicy,
    Approvals,
    ApprovalStore,
    CallSite,
    approval_layer,
)
from gateway.sandbox import RiskTier
from sessions.store import Store
from tests.sessions.conftest import store, store_url

__all__ = ["store", "store_url"]


def _echo_tool(name: str, ran: list[Any]) -> AgentTool:
    async def execute(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        ran.append(params)
        return AgentToolResult(content=[TextContent(text="ran")])

    return AgentTool(name=name, label=name, description="", parameters={"type": "object"}, execute=execute)


def _gate(approvals: Approvals, policy: ApprovalPolicy, workspace: Path) -> ApprovalGate:
    site = CallSite(session_id="s1", session_key="k", agent_id="main", run_id="r1", timeout_s=10)
    return ApprovalGate(approvals=approvals, policy=policy, site=site, workspace=workspace,
                        deny_threshold=RiskTier.HIGH)  # fmt: skip


async def test_never_leaves_the_tools_as_they_are(store: Store, tmp_path: Path) -> None:
    tools = [_echo_tool("bash", [])]
    approvals = Approvals(ApprovalStore(store.database), lambda name, payload: None)
    assert approval_layer(tools, _gate(approvals, ApprovalPolicy(), tmp_path)) is tools


async def test_a_call_waits_for_the_decision_and_the_rest_run_at_once(store: Store, tmp_path: Path) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    approvals = Approvals(ApprovalStore(store.database), lambda name, payload: sent.append((name, payload)))
    ran: list[Any] = []
    bash, read = approval_layer(
        [_echo_tool("bash", ran), _echo_tool("read", ran)],
        _gate(approvals, ApprovalPolicy(mode="risky"), tmp_path),
    )
    assert (await read.execute("t0", {"path": "notes.txt"}, None, None)).content[0].text == "ran"  # type: ignore[union-attr]
    call = asyncio.ensure_future(bash.execute("t1", {"command": "chmod 777 f"}, None, None))
    while not sent:
        await asyncio.sleep(0.01)
    assert ran == [{"path": "notes.txt"}]  # the bash call waits
    await approvals.decide(sent[0][1]["id"], "allow-once", by="alice", surface="dashboard")
    await call
    assert ran[-1] == {"command": "chmod 777 f"}

    denied = asyncio.ensure_future(bash.execute("t2", {"command": "chmod 777 g"}, None, None))
    while len(sent) < 3:
        await asyncio.sleep(0.01)
    await approvals.decide(sent[2][1]["id"], "deny", by="alice", surface="dashboard", note="no")
    with pytest.raises(
        ApprovalDenied, match=r"^Tool call denied by alice \(dashboard\): no\. Do not retry it"
    ):
        await denied
    assert ran[-1] == {"command": "chmod 777 f"}
