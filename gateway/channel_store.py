"""The durable half of the binding host: inbound dedupe, the reply outbox, pairing, cursors.

Everything lives in the gateway's database (tables `channel_*`, migration 0002), so it survives a
restart; every method is one transaction on the `Database` it is given (the one the gateway
opens with `sessions.store.open_database` and shares with the session store). How long rows live:

- dedupe rows until `expires_at` (never less than `DEDUPE_TTL_S` after they were written);
- pairing requests `PAIRING_TTL_S` unless approved; approvals until removed by hand;
- outbox rows while in flight, then `OUTBOX_KEEP_S` after they settled (`final` / `failed`);
- cursors for as long as the channel exists.

`sweep()` deletes what has expired; the daemon calls it periodically.

Errors are `sessions.errors` (`StoreUnavailable` when the database is busy, else `StoreError`),
as for the session store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from bindings import DEDUPE_TTL_S, OutboxRecord, OutboxState, PairingRequest, ReplyRoute, new_pairing_code
from bindings.access import PAIRING_MAX_PENDING, PAIRING_TTL_S
from sessions.db import Database
from sessions.schema import (
    channel_cursors,
    channel_dedupe,
    channel_outbox,
    channel_pairing_approvals,
    channel_pairing_requests,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

OUTBOX_KEEP_S = 7 * 24 * 3600
"""How long a settled outbox row is kept (a late retry with its key must still find it)."""
_SETTLED = ("final", "failed")
_CODE_ATTEMPTS = 8


def _now_ms() -> int:
    return int(time.time() * 1000)


class ChannelStore:
    """Durable binding state over `database`. `clock` returns Unix milliseconds (a seam)."""

    def __init__(self, database: Database, *, clock: Callable[[], int] = _now_ms) -> None:
        self._db = database
        self._clock = clock

    def _insert(self, table: Any) -> sqlite.Insert | postgresql.Insert:
        return postgresql.insert(table) if self._db.backend == "postgresql" else sqlite.insert(table)

    # -- dedupe ----------------------------------------------------------------------------------

    async def dedupe_seen(self, platform: str, account_id: str, event_id: str) -> bool:
        """Whether `event_id` is remembered and has not expired."""
        statement = select(channel_dedupe.c.expires_at).where(
            channel_dedupe.c.platform == platform,
            channel_dedupe.c.account_id == account_id,
            channel_dedupe.c.event_id == event_id,
        )
        async with self._db.read() as conn:
            expires = (await conn.execute(statement)).scalar()
        return expires is not None and expires > self._clock()

    async def dedupe_remember(self, platform: str, account_id: str, event_id: str, ttl_s: float) -> None:
        """Remember `event_id` for `max(ttl_s, DEDUPE_TTL_S)` from now (a later expiry already
        recorded is kept)."""
        expires = self._clock() + int(max(ttl_s, DEDUPE_TTL_S) * 1000)
        statement = (
            self._insert(channel_dedupe)
            .values(platform=platform, account_id=account_id, event_id=event_id, expires_at=expires)
            .on_conflict_do_update(
                index_elements=["platform", "account_id", "event_id"],
                set_={"expires_at": expires},
                where=channel_dedupe.c.expires_at < expires,
            )
        )
        async with self._db.write() as conn:
            await conn.execute(statement)

    # -- outbox ----------------------------------------------------------------------------------

    async def outbox_put(self, record: OutboxRecord) -> None:
        now = self._clock()
        values = _outbox_values(record)
        changes = {name: value for name, value in values.items() if name != "key"}
        statement = (
            self._insert(channel_outbox)
            .values(created_at=now, updated_at=now, **values)
            .on_conflict_do_update(index_elements=["key"], set_={**changes, "updated_at": now})
        )
        async with self._db.write() as conn:
            await conn.execute(statement)

    async def outbox_add(self, record: OutboxRecord) -> bool:
        """Insert `record` unless a record with its key exists (in any state); True if inserted."""
        now = self._clock()
        statement = (
            self._insert(channel_outbox)
            .values(created_at=now, updated_at=now, **_outbox_values(record))
            .on_conflict_do_nothing(index_elements=["key"])
        )
        async with self._db.write() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount == 1)

    async def outbox_update(
        self,
        key: str,
        *,
        state: OutboxState,
        text: str | None = None,
        platform_message_id: str | None = None,
    ) -> None:
        values: dict[str, Any] = {"state": state, "updated_at": self._clock()}
        if text is not None:
            values["text"] = text
        if platform_message_id is not None:
            values["platform_message_id"] = platform_message_id
        async with self._db.write() as conn:
            await conn.execute(update(channel_outbox).where(channel_outbox.c.key == key).values(**values))

    async def outbox_pending(self, platform: str, account_id: str) -> list[OutboxRecord]:
        query = (
            select(channel_outbox)
            .where(
                channel_outbox.c.platform == platform,
                channel_outbox.c.account_id == account_id,
                channel_outbox.c.state.not_in(_SETTLED),
            )
            .order_by(channel_outbox.c.created_at, channel_outbox.c.run_id, channel_outbox.c.chunk_index)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_outbox_record(row._mapping) for row in rows]

    # -- cursors ---------------------------------------------------------------------------------

    async def channel_cursors(self, platform: str, account_id: str) -> dict[str, str]:
        query = select(channel_cursors.c.channel_id, channel_cursors.c.message_id).where(
            channel_cursors.c.platform == platform, channel_cursors.c.account_id == account_id
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return {str(row[0]): str(row[1]) for row in rows}

    async def set_channel_cursor(
        self, platform: str, account_id: str, channel_id: str, message_id: str
    ) -> None:
        now = self._clock()
        statement = (
            self._insert(channel_cursors)
            .values(
                platform=platform,
                account_id=account_id,
                channel_id=channel_id,
                message_id=message_id,
                updated_at=now,
            )
            .on_conflict_do_update(
                index_elements=["platform", "account_id", "channel_id"],
                set_={"message_id": message_id, "updated_at": now},
            )
        )
        async with self._db.write() as conn:
            await conn.execute(statement)

    # -- pairing ---------------------------------------------------------------------------------

    async def pairing_request(
        self,
        platform: str,
        account_id: str,
        sender_id: str,
        sender_name: str = "",
        reply_route: ReplyRoute | None = None,
    ) -> PairingRequest | None:
        """The sender's live request (`is_new=False`), else a new one (`is_new=True`), else None
        when the account already has `PAIRING_MAX_PENDING` live requests."""
        now = self._clock()
        live = _live_requests(now)
        async with self._db.write() as conn:
            mine = (
                await conn.execute(
                    select(channel_pairing_requests).where(
                        live,
                        channel_pairing_requests.c.platform == platform,
                        channel_pairing_requests.c.account_id == account_id,
                        channel_pairing_requests.c.sender_id == sender_id,
                    )
                )
            ).first()
            if mine is not None:
                return _pairing_request(mine._mapping)
            pending = (
                await conn.execute(
                    select(func.count()).where(
                        live,
                        channel_pairing_requests.c.platform == platform,
                        channel_pairing_requests.c.account_id == account_id,
                    )
                )
            ).scalar_one()
            if int(pending) >= PAIRING_MAX_PENDING:
                return None
            code = await self._free_code(conn)
            row = {
                "code": code,
                "platform": platform,
                "account_id": account_id,
                "sender_id": sender_id,
                "sender_name": sender_name,
                "created_at": now,
                "approved_at": None,
                "reply_route": json.dumps(reply_route.as_dict()) if reply_route is not None else None,
            }
            await conn.execute(insert(channel_pairing_requests).values(**row))
        return replace(_pairing_request(row), is_new=True)

    async def _free_code(self, conn: AsyncConnection) -> str:
        for _ in range(_CODE_ATTEMPTS):
            code = new_pairing_code()
            taken = (
                await conn.execute(
                    select(channel_pairing_requests.c.code).where(channel_pairing_requests.c.code == code)
                )
            ).first()
            if taken is None:
                return code
        raise RuntimeError("could not draw an unused pairing code")  # 32^8 codes: practically never

    async def pairing_is_approved(self, platform: str, account_id: str, sender_id: str) -> bool:
        query = select(channel_pairing_approvals.c.sender_id).where(
            channel_pairing_approvals.c.platform == platform,
            channel_pairing_approvals.c.account_id == account_id,
            channel_pairing_approvals.c.sender_id == sender_id,
        )
        async with self._db.read() as conn:
            return (await conn.execute(query)).first() is not None

    async def pairing_list(self) -> list[PairingRequest]:
        """Requests waiting for approval (not expired), oldest first."""
        query = (
            select(channel_pairing_requests)
            .where(_live_requests(self._clock()))
            .order_by(channel_pairing_requests.c.created_at)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_pairing_request(row._mapping) for row in rows]

    async def pairing_approve(
        self, code: str, *, platform: str | None = None, account_id: str | None = None
    ) -> PairingRequest | None:
        """Approve the live request with `code` (case-insensitive), of `platform` and
        `account_id` when given; None when there is none."""
        now = self._clock()
        wanted = code.strip().upper()
        query = select(channel_pairing_requests).where(
            _live_requests(now), channel_pairing_requests.c.code == wanted
        )
        if platform is not None:
            query = query.where(channel_pairing_requests.c.platform == platform)
        if account_id is not None:
            query = query.where(channel_pairing_requests.c.account_id == account_id)
        async with self._db.write() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return None
            request = _pairing_request(row._mapping)
            await conn.execute(
                update(channel_pairing_requests)
                .where(channel_pairing_requests.c.code == wanted)
                .values(approved_at=now)
            )
            await conn.execute(
                self._insert(channel_pairing_approvals)
                .values(
                    platform=request.platform,
                    account_id=request.account_id,
                    sender_id=request.sender_id,
                    code=wanted,
                    approved_at=now,
                )
                .on_conflict_do_update(
                    index_elements=["platform", "account_id", "sender_id"],
                    set_={"code": wanted, "approved_at": now},
                )
            )
        return replace(request, approved=True)

    # -- housekeeping ----------------------------------------------------------------------------

    async def sweep(self) -> int:
        """Delete expired dedupe rows, expired unapproved pairing requests and long-settled outbox
        rows. Returns how many rows went."""
        now = self._clock()
        removed = 0
        async with self._db.write() as conn:
            for statement in (
                delete(channel_dedupe).where(channel_dedupe.c.expires_at <= now),
                delete(channel_pairing_requests).where(
                    channel_pairing_requests.c.approved_at.is_(None),
                    channel_pairing_requests.c.created_at <= now - PAIRING_TTL_S * 1000,
                ),
                delete(channel_outbox).where(
                    channel_outbox.c.state.in_(_SETTLED),
                    channel_outbox.c.updated_at <= now - OUTBOX_KEEP_S * 1000,
                ),
            ):
                removed += int((await conn.execute(statement)).rowcount or 0)
        return removed


def _live_requests(now: int) -> Any:
    return and_(
        channel_pairing_requests.c.approved_at.is_(None),
        channel_pairing_requests.c.created_at > now - PAIRING_TTL_S * 1000,
    )


def _outbox_values(record: OutboxRecord) -> dict[str, Any]:
    return {
        "key": record.key,
        "platform": record.platform,
        "account_id": record.account_id,
        "route": json.dumps(record.route.as_dict(), separators=(",", ":")),
        "run_id": record.run_id,
        "chunk_index": record.chunk_index,
        "text": record.text,
        "state": record.state,
        "platform_message_id": record.platform_message_id,
    }


def _outbox_record(row: Any) -> OutboxRecord:
    return OutboxRecord(
        key=str(row["key"]),
        platform=row["platform"],
        account_id=str(row["account_id"]),
        route=ReplyRoute.from_dict(json.loads(row["route"])),
        run_id=str(row["run_id"]),
        chunk_index=int(row["chunk_index"]),
        text=str(row["text"]),
        state=row["state"],
        platform_message_id=row["platform_message_id"],
    )


def _pairing_request(row: Any) -> PairingRequest:
    return PairingRequest(
        code=str(row["code"]),
        platform=row["platform"],
        account_id=str(row["account_id"]),
        sender_id=str(row["sender_id"]),
        sender_name=str(row["sender_name"] or ""),
        created_at_ms=int(row["created_at"]),
        approved=row["approved_at"] is not None,
        reply_route=ReplyRoute.from_dict(json.loads(route)) if (route := row.get("reply_route")) else None,
    )


__all__ = ["OUTBOX_KEEP_S", "ChannelStore"]
