"""Whether a discovered Python extension may run: its trust state, stored in the database.

A newly discovered extension is `pending` and is not imported. An operator moves it:

    pending  --enable-->  enabled  --disable-->  disabled  --enable-->  enabled
    pending  --disable--> disabled

Only the gateway puts an extension back to `pending`: when the extension of that name is found
somewhere else than where it was approved (another distribution, another file), so code nobody
approved never runs under an approved name. Asking for the state an extension is already in
changes nothing. Every change is one row of `extension_trust_changes` (who, when, from, to) and
one `gateway.audit` log line; `extension_trust` holds the current state. Rows are never deleted.

Store errors are `sessions.errors` (StoreUnavailable when the database is busy).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import RowMapping, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.extensions.errors import TrustTransitionError, UnknownExtensionError
from sessions.db import Database
from sessions.schema import ExtensionTrustState as TrustState
from sessions.schema import extension_trust, extension_trust_changes

__all__ = ["GATEWAY_ACTOR", "TrustRecord", "TrustState", "TrustStore", "check_transition"]

audit_log = structlog.get_logger("gateway.audit")

GATEWAY_ACTOR = "gateway"
"""Who made a change the gateway made by itself (discovery, an origin that changed)."""

_ALLOWED: dict[TrustState, frozenset[TrustState]] = {
    TrustState.PENDING: frozenset({TrustState.ENABLED, TrustState.DISABLED}),
    TrustState.ENABLED: frozenset({TrustState.DISABLED}),
    TrustState.DISABLED: frozenset({TrustState.ENABLED}),
}
"""What an operator may move an extension to from each state (same-state requests are no-ops)."""


def check_transition(name: str, current: TrustState, wanted: TrustState) -> None:
    """Raise TrustTransitionError, naming the states it expected, when an operator may not move
    extension `name` from `current` to `wanted` (a same-state request is allowed: a no-op)."""
    if wanted == current or wanted in _ALLOWED[current]:
        return
    expected = sorted(state.value for state, targets in _ALLOWED.items() if wanted in targets)
    raise TrustTransitionError(
        f"extension {name} is {current.value}; it can become {wanted.value} only from {' or '.join(expected)}"
    )


@dataclass(frozen=True, slots=True)
class TrustRecord:
    name: str
    state: TrustState
    origin: str
    """Where the extension was found when this state was set."""
    discovered_at: int
    changed_at: int
    """Unix milliseconds."""
    changed_by: str


class TrustStore:
    """The `extension_trust` tables over `database`. `clock` is Unix milliseconds (a seam)."""

    def __init__(self, database: Database, *, clock: Callable[[], int] | None = None) -> None:
        self._db = database
        self._clock = clock or (lambda: int(time.time() * 1000))

    async def all(self) -> dict[str, TrustRecord]:
        """Every extension ever discovered, by name."""
        async with self._db.read() as conn:
            rows = (await conn.execute(select(extension_trust))).all()
        return {str(row._mapping["name"]): _record(row._mapping) for row in rows}

    async def discovered(self, name: str, origin: str) -> TrustRecord:
        """Record that extension `name` was found at `origin`: a new one is `pending`; a known one
        found at another origin goes back to `pending`. Returns its record."""
        now = self._clock()
        async with self._db.write() as conn:
            current = await _get(conn, name)
            if current is not None and current.origin == origin:
                return current
            if current is None:
                row = {
                    "name": name,
                    "state": TrustState.PENDING.value,
                    "origin": origin,
                    "discovered_at": now,
                    "changed_at": now,
                    "changed_by": GATEWAY_ACTOR,
                }
                await conn.execute(insert(extension_trust), [row])
                record = _record(row)
            else:
                record = TrustRecord(name, TrustState.PENDING, origin, now, now, GATEWAY_ACTOR)
                await _store(conn, record)
            await _log_change(conn, current, record)
        _audit(current, record)
        return record

    async def change(self, name: str, wanted: TrustState, actor: str) -> tuple[TrustRecord, bool]:
        """Move extension `name` to `wanted` on behalf of `actor` (a description of who asked).
        Returns the record and whether anything changed. Raises UnknownExtensionError for a name
        never discovered, TrustTransitionError for a move `check_transition` refuses (moving to
        `pending` is the gateway's alone)."""
        if wanted == TrustState.PENDING:
            raise TrustTransitionError(f"extension {name} cannot be set to pending; enable or disable it")
        async with self._db.write() as conn:
            current = await _get(conn, name)
            if current is None:
                raise UnknownExtensionError(f"no extension named {name!r} has been discovered")
            check_transition(name, current.state, wanted)
            if current.state == wanted:
                return current, False
            record = TrustRecord(name, wanted, current.origin, current.discovered_at, self._clock(), actor)
            await _store(conn, record)
            await _log_change(conn, current, record)
        _audit(current, record)
        return record, True

    async def history(self, name: str) -> list[tuple[str | None, str, str, int]]:
        """Every change of extension `name`, oldest first: `(from, to, actor, at)`."""
        table = extension_trust_changes
        query = select(table).where(table.c.name == name).order_by(table.c.id)
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [(row.from_state, str(row.to_state), str(row.actor), int(row.at)) for row in rows]


async def _get(conn: AsyncConnection, name: str) -> TrustRecord | None:
    row = (await conn.execute(select(extension_trust).where(extension_trust.c.name == name))).first()
    return None if row is None else _record(row._mapping)


async def _store(conn: AsyncConnection, record: TrustRecord) -> None:
    values = {
        "state": record.state.value,
        "origin": record.origin,
        "changed_at": record.changed_at,
        "changed_by": record.changed_by,
    }
    await conn.execute(update(extension_trust).where(extension_trust.c.name == record.name).values(values))


async def _log_change(conn: AsyncConnection, before: TrustRecord | None, after: TrustRecord) -> None:
    row = {
        "name": after.name,
        "from_state": before.state.value if before is not None else None,
        "to_state": after.state.value,
        "origin": after.origin,
        "actor": after.changed_by,
        "at": after.changed_at,
    }
    await conn.execute(insert(extension_trust_changes), [row])


def _audit(before: TrustRecord | None, after: TrustRecord) -> None:
    audit_log.warning(
        "extensions.trust_changed",
        extension=after.name,
        from_state=before.state.value if before is not None else None,
        to_state=after.state.value,
        origin=after.origin,
        previous_origin=before.origin if before is not None and before.origin != after.origin else None,
        actor=after.changed_by,
    )


def _record(row: RowMapping | Mapping[str, Any]) -> TrustRecord:
    return TrustRecord(
        name=str(row["name"]),
        state=TrustState(str(row["state"])),
        origin=str(row["origin"]),
        discovered_at=int(row["discovered_at"]),
        changed_at=int(row["changed_at"]),
        changed_by=str(row["changed_by"]),
    )
