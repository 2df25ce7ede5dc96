"""Errors of approvals.

ApprovalError
├── ApprovalNotFound      no request has that id
└── ApprovalTransition    the request is no longer pending (decided, expired or cancelled)

A denied tool call is not an error of this package: the tool raises `ApprovalDenied`
(an `agent_core.ToolError`), which the model reads as an error result.
"""

from __future__ import annotations

from agent_core.errors import ToolError


class ApprovalError(Exception):
    """Root of the approvals' errors."""


class ApprovalNotFound(ApprovalError):
    def __init__(self, approval_id: str) -> None:
        super().__init__(f"no approval request {approval_id!r}")
        self.approval_id = approval_id


class ApprovalTransition(ApprovalError):
    """A request left `pending` once; it cannot be decided again."""


class ApprovalDenied(ToolError):
    """The tool call did not run: a person denied it, nobody decided in time, or its run ended."""
