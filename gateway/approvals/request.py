"""One approval request: what the person is asked about, its state, and how it ended.

A request is `pending` from the moment its tool call waits until one of the terminal states:
`allowed` (allow-once, or allow-always: the same shape of call runs unasked for the rest of the
session), `denied` (by a person), `expired` (nobody decided within the agent's
`approval_timeout_s`) or `cancelled` (its run was aborted, or the gateway restarted while it
waited). A terminal request never changes again; the row stays as the audit trail.

`wire()` renders the request as OpenClaw's approval snapshot (`id`, `urlPath`, `createdAtMs`,
`expiresAtMs`, `presentation`, `status`, `decision`, `reason`, `resolvedAtMs`, `resolver`,
`source`) plus the gateway's own fields (`sessionId`, `sessionKey`, `runId`, `toolCallId`,
`tool`, `args`, `command`, `risk`, `rule`, `note`, `decidedBy`, `surface`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, TypeAlias

import msgspec

from gateway.approvals.errors import ApprovalTransition

Decision: TypeAlias = Literal["allow-once", "allow-always", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow-once", "allow-always", "deny")
PREVIEW_CHARS = 200


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self is not ApprovalStatus.PENDING


@dataclass(frozen=True, kw_only=True)
class Ending:
    """How a pending request ends: the terminal status, OpenClaw's decision and reason words,
    the note shown to the person and the model, who ended it and from which surface."""

    status: ApprovalStatus
    reason: str
    decision: Decision | None = None
    note: str | None = None
    decided_by: str | None = None
    surface: str | None = None

    def __post_init__(self) -> None:
        if not self.status.terminal:
            raise ValueError("an ending is a terminal status, not 'pending'")


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    id: str
    session_id: str
    session_key: str | None
    agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    detail: dict[str, Any] = msgspec.field(default_factory=dict)
    """What the person is shown: `args`, `command` (bash), `risk`, `classes`, `riskReason`,
    `rule` (why it asked), `shape` (what allow-always covers)."""
    created_at: int
    expires_at: int
    status: ApprovalStatus = ApprovalStatus.PENDING
    decision: Decision | None = None
    reason: str | None = None
    note: str | None = None
    decided_by: str | None = None
    surface: str | None = None
    decided_at: int | None = None

    def ended(self, ending: Ending, at: int) -> ApprovalRequest:
        """This request in its terminal state. Raises ApprovalTransition when it is not pending."""
        if self.status.terminal:
            raise ApprovalTransition(f"approval {self.id} is already {self.status.value}; expected pending")
        return msgspec.structs.replace(
            self,
            status=ending.status,
            decision=ending.decision,
            reason=ending.reason,
            note=ending.note,
            decided_by=ending.decided_by,
            surface=ending.surface,
            decided_at=at,
        )

    def command_text(self) -> str:
        command = self.detail.get("command")
        if isinstance(command, str) and command:
            return command
        return f"{self.tool_name} {json.dumps(self.detail.get('args'), ensure_ascii=False, sort_keys=True)}"

    def wire(self) -> dict[str, Any]:
        text = self.command_text()
        detail = self.detail
        warning = f"Asked because {detail.get('rule') or 'the policy asks'}"
        if detail.get("riskReason"):
            warning += f" ({detail['riskReason']})"
        out: dict[str, Any] = {
            "id": self.id,
            "urlPath": f"/ui/#/session/{self.session_id}",
            "createdAtMs": self.created_at,
            "expiresAtMs": self.expires_at,
            "presentation": {
                "kind": "exec",
                "commandText": text,
                "commandPreview": text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…",
                "warningText": warning,
                "agentId": self.agent_id,
                "allowedDecisions": list(DECISIONS),
            },
            "status": self.status.value,
            "source": {"agentId": self.agent_id},
            "sessionId": self.session_id,
            "sessionKey": self.session_key,
            "runId": self.run_id,
            "toolCallId": self.tool_call_id,
            "tool": self.tool_name,
            "args": detail.get("args"),
            "command": detail.get("command"),
            "risk": detail.get("risk"),
            "rule": detail.get("rule"),
        }
        if self.session_key:
            out["sourceSessionKey"] = self.session_key
            out["source"]["sessionKey"] = self.session_key
        if self.status.terminal:
            out.update(
                {
                    "resolvedAtMs": self.decided_at,
                    "decision": self.decision,
                    "reason": self.reason,
                    "note": self.note,
                    "decidedBy": self.decided_by,
                    "surface": self.surface,
                }
            )
            if self.decided_by is not None:
                kind = "channel" if self.surface in ("discord", "slack") else "device"
                out["resolver"] = {"kind": kind, "id": self.decided_by}
            else:
                out["resolver"] = {"kind": "system"}
        return out
