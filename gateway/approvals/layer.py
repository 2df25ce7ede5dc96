"""The approvals layer of the tool pipeline: a call the policy asks about waits for a decision.

`approval_layer(tools, gate)` wraps every tool. Before a call runs, `assess` checks it against
the agent's policy; a call that must ask runs unasked when an allow-always decision of its
session covers it, else waits (`Approvals.wait_for`). Allowed, it runs as it would have (still
through the sandbox); otherwise the tool raises `ApprovalDenied`, and the model reads who
denied it and why, or that nobody decided in time.

The waiting happens inside the tool call, after the model's reply has completed, so it does not
count toward the run's `idle_timeout_s` (which watches the model's stream only).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from gateway.approvals.errors import ApprovalDenied
from gateway.approvals.policy import ApprovalPolicy, assess
from gateway.approvals.request import ApprovalRequest, ApprovalStatus
from gateway.approvals.service import Approvals, CallSite
from gateway.sandbox.risk import RiskTier

audit_log = structlog.get_logger("gateway.audit")


@dataclass(frozen=True, kw_only=True)
class ApprovalGate:
    """What the layer needs for one run."""

    approvals: Approvals
    policy: ApprovalPolicy
    site: CallSite
    workspace: Path
    deny_threshold: RiskTier | None


def refusal(request: ApprovalRequest) -> str:
    """What the model reads when its call did not run."""
    if request.status is ApprovalStatus.DENIED:
        who = request.decided_by or "a person"
        where = f" ({request.surface})" if request.surface else ""
        why = f": {request.note}" if request.note else " (no reason given)"
        return f"Tool call denied by {who}{where}{why}. Do not retry it; ask the user how to proceed."
    if request.status is ApprovalStatus.EXPIRED:
        waited = (request.expires_at - request.created_at) / 1000
        return f"Tool call denied: it needed approval and no one decided within {waited:g} s."
    return f"Tool call not run: its approval request was {request.status.value}. {request.note or ''}".strip()


def _wrap(tool: AgentTool, gate: ApprovalGate) -> AgentTool:
    inner = tool.execute

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        ask = await asyncio.to_thread(
            assess,
            gate.policy,
            tool.name,
            params,
            workspace=gate.workspace,
            deny_threshold=gate.deny_threshold,
        )
        if ask is not None:
            grant = await gate.approvals.granted(gate.site.session_id, ask)
            if grant is not None:
                audit_log.warning(
                    "approval.session_grant",
                    approval_id=grant.id,
                    session_id=gate.site.session_id,
                    tool=tool.name,
                    tool_call_id=tool_call_id,
                    shape=ask.shape,
                )
            else:
                request = await gate.approvals.wait_for(
                    gate.site,
                    tool_call_id=tool_call_id,
                    tool_name=tool.name,
                    args=params,
                    ask=ask,
                    signal=signal,
                )
                if request.status is not ApprovalStatus.ALLOWED:
                    raise ApprovalDenied(refusal(request))
        return await inner(tool_call_id, params, signal, on_update)

    return msgspec.structs.replace(tool, execute=execute)


def approval_layer(tools: list[AgentTool], gate: ApprovalGate) -> list[AgentTool]:
    """`tools` wrapped (see the module docstring); unchanged when the policy never asks."""
    if not gate.policy.active:
        return tools
    return [_wrap(tool, gate) for tool in tools]
