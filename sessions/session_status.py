"""A session's existence and status, inside a caller's transaction: its row, its record as a
direct transaction sees it, and the moves `SESSION_TRANSITIONS` allows.

Every area of the store (`sessions.session_tree`, the event log, the input ledger, runs,
transcripts) uses these to check that a session exists and to move its status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from sqlalchemy import select, update

from sessions import _store_rows as rows
from sessions.errors import InvalidTransition, NotFound
from sessions.records import SessionRecord
from sessions.schema import SessionStatus, sessions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from sessions._direct_write import DirectWrite

__all__ = ["SESSION_TRANSITIONS", "session_in", "session_row", "transition"]

# The statuses a session may move to from each status.
SESSION_TRANSITIONS: Final[Mapping[SessionStatus, frozenset[SessionStatus]]] = {
    SessionStatus.IDLE: frozenset({SessionStatus.RUNNING, SessionStatus.ARCHIVED}),
    SessionStatus.RUNNING: frozenset({SessionStatus.IDLE, SessionStatus.INTERRUPTED}),
    SessionStatus.INTERRUPTED: frozenset({SessionStatus.RUNNING, SessionStatus.IDLE, SessionStatus.ARCHIVED}),
    SessionStatus.ARCHIVED: frozenset({SessionStatus.IDLE}),
}


async def session_row(conn: AsyncConnection, session_id: str) -> rows.AnyRow:
    """The session's row; raise NotFound when there is none."""
    row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))).first()
    if row is None:
        raise NotFound(f"no session {session_id}")
    return row


_SESSION_COLUMNS: Final = [column.name for column in sessions.c]
_SESSION_SQL: Final = f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE id = ?"
_KEYS_SQL: Final = "SELECT key FROM session_keys WHERE session_id = ?"


async def session_in(tx: DirectWrite, session_id: str) -> SessionRecord | None:
    """The session as a direct transaction sees it (`Database.write_direct`, `read_direct`), or
    None."""
    found = await tx.fetch(_SESSION_SQL, [session_id])
    if not found:
        return None
    keys = [key for (key,) in await tx.fetch(_KEYS_SQL, [session_id])]
    return rows.session_record(dict(zip(_SESSION_COLUMNS, found[0], strict=True)), keys)


async def transition(
    conn: AsyncConnection,
    session_id: str,
    target: SessionStatus,
    expected: set[SessionStatus] | None,
    *,
    now: int,
    same_ok: bool = False,
) -> None:
    """Move the session to `target` as `SESSION_TRANSITIONS` (and `expected`, when given)
    allow; `same_ok` also accepts staying in `target`. Raise InvalidTransition naming the states
    it would have accepted, NotFound for an unknown session."""
    allowed = {state for state, targets in SESSION_TRANSITIONS.items() if target in targets}
    if same_ok:
        allowed.add(target)
    if expected is not None:
        allowed &= expected
    statement = (
        update(sessions)
        .where(sessions.c.id == session_id, sessions.c.status.in_([s.value for s in allowed]))
        .values(status=target.value, updated_at=now)
    )
    if (await conn.execute(statement)).rowcount == 1:
        return
    current = (await session_row(conn, session_id))._mapping["status"]
    raise InvalidTransition(f"session {session_id}", current, target.value, (s.value for s in allowed))
