"""Tool calls waiting for a decision: `exec.approval.list`, `.get`, `.resolve`, `.waitDecision`
(scope `operator.approvals`, which `operator.admin` implies).

Answers carry the request's snapshot (`gateway.approvals.request`): `list` answers
`{"approvals": [...]}`, `get` and `waitDecision` `{"approval": ...}`, `resolve`
`{"applied": bool, "approval": ...}` (`applied` false: the request had already ended, and the
snapshot says how). Who decided is the connection's named token, else its client's name; the
surface is its client id (`dashboard`, `gatewayctl`, ...), or the channel of a `reviewer`.
"""

from __future__ import annotations

from typing import Any

from gateway.approvals import ApprovalNotFound, ApprovalRequest, Approvals
from gateway.methods.base import Call, MethodError, from_sessions_error
from gateway.methods.lookup import session_of_key
from gateway.protocol import approval_params as ap
from gateway.protocol.codes import ErrorCode
from sessions import SessionsError

DEFAULT_WAIT_MS = 30_000


def _approvals(call: Call) -> Approvals:
    return call.state.approvals


def decider(call: Call, reviewer: ap.ApprovalReviewer | None) -> tuple[str, str]:
    """`(who, surface)` of a decision made through this call."""
    if reviewer is not None:
        return f"{reviewer.sender_id}", f"{reviewer.channel}"
    conn = call.conn
    client = conn.client.get("displayName") or conn.client.get("id") or "client"
    who = f"token {conn.credential}" if conn.credential else "operator"
    return who, str(conn.client.get("id") or client)


async def _get(call: Call, approval_id: str) -> ApprovalRequest:
    try:
        return await _approvals(call).get(approval_id)
    except ApprovalNotFound as exc:
        raise MethodError(ErrorCode.NOT_FOUND, str(exc)) from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc


async def approval_list(call: Call, params: ap.ExecApprovalListParams) -> Any:
    session_id = None
    if params.session_key is not None:
        record = await session_of_key(call, params.session_key)
        if record is None:
            return {"approvals": []}
        session_id = record.id
    try:
        found = await _approvals(call).requests(
            history=bool(params.history), limit=params.limit or 100, session_id=session_id
        )
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"approvals": [request.wire() for request in found]}


async def approval_get(call: Call, params: ap.ExecApprovalGetParams) -> Any:
    return {"approval": (await _get(call, params.id)).wire()}


async def approval_resolve(call: Call, params: ap.ExecApprovalResolveParams) -> Any:
    who, surface = decider(call, params.reviewer)
    reason = params.reason.strip() if params.reason else None
    try:
        applied, request = await _approvals(call).decide(
            params.id, params.decision, by=who, surface=surface, note=reason or None
        )
    except ApprovalNotFound as exc:
        raise MethodError(ErrorCode.NOT_FOUND, str(exc)) from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"applied": applied, "approval": request.wire()}


async def approval_wait(call: Call, params: ap.ExecApprovalWaitDecisionParams) -> Any:
    timeout_ms = params.timeout_ms if params.timeout_ms is not None else DEFAULT_WAIT_MS
    try:
        request = await _approvals(call).wait_decision(params.id, timeout_ms / 1000)
    except ApprovalNotFound as exc:
        raise MethodError(ErrorCode.NOT_FOUND, str(exc)) from exc
    except SessionsError as exc:
        raise from_sessions_error(exc) from exc
    return {"approval": request.wire()}
