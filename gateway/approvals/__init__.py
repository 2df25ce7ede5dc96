"""Approvals: a person decides before a risky tool call runs.

An agent's policy (`approvals = "never" | "risky" | "always"` and its rules, `policy`) picks
the calls that must ask; the pipeline's approval layer (`layer`) makes such a call wait;
`Approvals` (`service`) stores each request (`store`, table `tool_approvals`), announces it, and
ends it with a person's decision, a timeout or the end of its run. docs/approvals.md.

The service, its store and the requests are what every daemon runs at start-up. The policy and
the layer (command classification, path rules) are imported with the first name of theirs asked
for here, which is when the first run's tools look up its agent's policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.lazy_exports import exports_on_first_use
from gateway.approvals.errors import ApprovalDenied, ApprovalError, ApprovalNotFound, ApprovalTransition
from gateway.approvals.request import DECISIONS, ApprovalRequest, ApprovalStatus, Decision, Ending
from gateway.approvals.service import Approvals, CallSite
from gateway.approvals.store import ApprovalStore

if TYPE_CHECKING:
    from gateway.approvals.layer import ApprovalGate, approval_layer, refusal
    from gateway.approvals.policy import ApprovalPolicy, Ask, assess, policy_for
    from gateway.approvals.shape import command_shape

_ON_FIRST_USE = {
    "ApprovalGate": "gateway.approvals.layer",
    "approval_layer": "gateway.approvals.layer",
    "refusal": "gateway.approvals.layer",
    "ApprovalPolicy": "gateway.approvals.policy",
    "Ask": "gateway.approvals.policy",
    "assess": "gateway.approvals.policy",
    "policy_for": "gateway.approvals.policy",
    "command_shape": "gateway.approvals.shape",
}
"""Names this package exports from the modules it does not import up front."""

__getattr__ = exports_on_first_use(__name__, globals(), _ON_FIRST_USE)


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
