"""The durable half of approvals: the `tool_approvals` table (migration 0007).

A row is written when a tool call starts to wait and updated once, when the request ends; the
update only applies to a pending row, so two deciders racing each other (or a decision racing
the timeout) end it exactly once. Rows are kept as the audit trail. Each method is one
transaction; errors are `sessions.errors` (`StoreUnavailable` when the database is busy).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import RowMapping, insert, select, update

from gateway.approvals.request import ApprovalRequest, ApprovalStatus, Ending
from sessions.db import Database
from sessions.schema import tool_approvals

__all__ = ["ApprovalStore"]

_t = tool_approvals


class ApprovalStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def add(self, request: ApprovalRequest) -> None:
        async with self._db.write() as conn:
            await conn.execute(insert(_t).values(**_values(request)))

    async def get(self, approval_id: str) -> ApprovalRequest | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(_t).where(_t.c.id == approval_id))).first()
        return _request(row._mapping) if row is not None else None

    async def requests(
        self, *, pending_only: bool, limit: int = 100, session_id: str | None = None
    ) -> list[ApprovalRequest]:
        """Pending requests oldest first, or (history) every request newest first."""
        query = select(_t)
        if session_id is not None:
            query = query.where(_t.c.session_id == session_id)
        if pending_only:
            query = query.where(_t.c.status == ApprovalStatus.PENDING.value).order_by(
                _t.c.created_at, _t.c.id
            )
        else:
            query = query.order_by(_t.c.created_at.desc(), _t.c.id.desc())
        async with self._db.read() as conn:
            rows = (await conn.execute(query.limit(limit))).all()
        return [_request(row._mapping) for row in rows]

    async def end(self, request: ApprovalRequest, ending: Ending, at: int) -> ApprovalRequest | None:
        """End a pending request; None when it had already ended (nothing is changed then)."""
        ended = request.ended(ending, at)
        async with self._db.write() as conn:
            result = await conn.execute(
                update(_t)
                .where(_t.c.id == request.id, _t.c.status == ApprovalStatus.PENDING.value)
                .values(
                    status=ended.status.value,
                    decision=ended.decision,
                    reason=ended.reason,
                    note=ended.note,
                    decided_by=ended.decided_by,
                    surface=ended.surface,
                    decided_at=at,
                )
            )
        return ended if result.rowcount else None

    async def session_grants(self, session_id: str) -> list[ApprovalRequest]:
        """The session's allow-always decisions."""
        query = select(_t).where(_t.c.session_id == session_id, _t.c.decision == "allow-always")
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_request(row._mapping) for row in rows]


def _values(request: ApprovalRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "session_id": request.session_id,
        "session_key": request.session_key,
        "agent_id": request.agent_id,
        "run_id": request.run_id,
        "tool_call_id": request.tool_call_id,
        "tool_name": request.tool_name,
        "request": json.dumps(request.detail, separators=(",", ":"), ensure_ascii=False),
        "status": request.status.value,
        "decision": request.decision,
        "reason": request.reason,
        "note": request.note,
        "decided_by": request.decided_by,
        "surface": request.surface,
        "created_at": request.created_at,
        "expires_at": request.expires_at,
        "decided_at": request.decided_at,
    }


def _request(row: RowMapping) -> ApprovalRequest:
    try:
        detail = json.loads(row["request"])
    except ValueError:
        detail = {}
    return ApprovalRequest(
        id=row["id"],
        session_id=row["session_id"],
        session_key=row["session_key"],
        agent_id=row["agent_id"],
        run_id=row["run_id"],
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        detail=detail if isinstance(detail, dict) else {},
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        status=ApprovalStatus(row["status"]),
        decision=row["decision"],
        reason=row["reason"],
        note=row["note"],
        decided_by=row["decided_by"],
        surface=row["surface"],
        decided_at=row["decided_at"],
    )
