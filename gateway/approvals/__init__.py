"""Approvals: a person decides before a risky tool call runs.

An agent's policy (`approvals = "never" | "risky" | "always"` and its rules, `policy`) picks
the calls that must ask; the pipeline's approval layer (`layer`) makes such a call wait;
`Approvals` (`service`) stores each request (`store`, table `tool_approvals`), announces it, and
ends it with a person's decision, a timeout or the end of its run. docs/approvals.md.
"""

from gateway.approvals.errors import ApprovalDenied, ApprovalError, ApprovalNotFound, ApprovalTransition
from gateway.approvals.layer import ApprovalGate, approval_layer, refusal
from gateway.approvals.policy import ApprovalPolicy, Ask, assess, policy_for
from gateway.approvals.request import DECISIONS, ApprovalRequest, ApprovalStatus, Decision, Ending
from gateway.approvals.service import Approvals, CallSite
from gateway.approvals.shape import command_shape
from gateway.approvals.store import ApprovalStore

__all__ = [
    "DECISIONS",
    "ApprovalDenied",
    "ApprovalError",
    "ApprovalGate",
    "ApprovalNotFound",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalStatus",
    "ApprovalStore",
    "ApprovalTransition",
    "Approvals",
    "Ask",
    "CallSite",
    "Decision",
    "Ending",
    "approval_layer",
    "assess",
    "command_shape",
    "policy_for",
    "refusal",
]
