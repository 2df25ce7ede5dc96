"""Parameter models of the `exec.approval.*` methods, after OpenClaw's `ExecApproval*Params`.

`exec.approval.get` and `exec.approval.resolve` take OpenClaw's fields (`id`; `decision`,
`reviewer`); the gateway adds `reason` to `resolve` (shown to the model when it denies) and
`history`, `limit` and `sessionKey` to `list`. `waitDecision` takes the request's `id` and how
long to wait (`timeoutMs`, at most 10 minutes).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from gateway.protocol.params_base import CompatParams, NonEmptyStr, SessionKey

ApprovalId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
MAX_WAIT_MS = 600_000


class ExecApprovalListParams(CompatParams):
    history: bool | None = None
    """True: every request, newest first (the audit trail); else the pending ones, oldest first."""
    limit: Annotated[int, Field(ge=1, le=500)] | None = None
    session_key: SessionKey | None = None


class ExecApprovalGetParams(CompatParams):
    id: ApprovalId


class ApprovalReviewer(CompatParams):
    channel: NonEmptyStr
    account_id: NonEmptyStr
    sender_id: NonEmptyStr


class ExecApprovalResolveParams(CompatParams):
    id: ApprovalId
    decision: Literal["allow-once", "allow-always", "deny"]
    reviewer: ApprovalReviewer | None = None
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = None
    grant_expires_in_days: Annotated[int, Field(ge=1, le=3650)] | None = None
    """Accepted for OpenClaw clients; an allow-always decision lasts for the session here."""


class ExecApprovalWaitDecisionParams(CompatParams):
    id: ApprovalId
    timeout_ms: Annotated[int, Field(ge=0, le=MAX_WAIT_MS)] | None = None
