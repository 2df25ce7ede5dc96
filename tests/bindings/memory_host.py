"""An in-memory `BindingHost` for the bindings' tests.

It keeps the promises of the real host that the bindings rely on: `submit` is idempotent on the
idempotency key, a remembered event id is seen until its TTL ends, outbox records and cursors are
kept, pairing codes expire and are limited per account. Tests drive replies with `emit`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import replace

from bindings.access import PAIRING_MAX_PENDING, PAIRING_TTL_S, new_pairing_code
from bindings.host import (
    InboundMessage,
    OutboxRecord,
    OutboxState,
    PairingRequest,
    Platform,
    ReplyEvent,
    ReplyListener,
    ReplyRoute,
    SubmitResult,
)


class MemoryHost:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.submitted: list[InboundMessage] = []
        self.results: dict[str, SubmitResult] = {}
        self.listeners: dict[str, list[ReplyListener]] = {}
        self.seen: dict[tuple[str, str, str], float] = {}
        self.outbox: dict[str, OutboxRecord] = {}
        self.cursors: dict[tuple[str, str], dict[str, str]] = {}
        self.pairings: dict[str, PairingRequest] = {}
        self.approved: set[tuple[str, str, str]] = set()
        self.states: list[tuple[str, str, float | None]] = []
        self.reject_next: str | None = None
        self.hold_submits: asyncio.Event | None = None
        """When set, `submit` waits for it (a slow database)."""
        self.submit_calls = 0
        self._runs = itertools.count(1)
        self._changed = asyncio.Event()

    # -- InboundSink ---------------------------------------------------------------------------

    async def submit(self, inbound: InboundMessage) -> SubmitResult:
        key = inbound.idempotency_key
        if key in self.results:
            return replace(self.results[key], status="duplicate")
        self.submit_calls += 1
        if self.hold_submits is not None:
            await self.hold_submits.wait()
        if self.reject_next is not None:  # like the real host: a rejected input is not recorded
            reason, self.reject_next = self.reject_next, None
            return SubmitResult(status="rejected", reason=reason)
        result = SubmitResult(status="accepted", run_id=f"run-{next(self._runs)}")
        self.results[key] = result
        self.submitted.append(inbound)
        self._changed.set()
        return result

    # -- ReplySource ---------------------------------------------------------------------------

    def subscribe_replies(self, session_key: str, listener: ReplyListener) -> Callable[[], None]:
        self.listeners.setdefault(session_key, []).append(listener)

        def unsubscribe() -> None:
            listeners = self.listeners.get(session_key, [])
            if listener in listeners:
                listeners.remove(listener)

        return unsubscribe

    def emit(self, session_key: str, run_id: str, kind: str, text: str) -> int:
        """Deliver a reply event to the session's listeners; returns how many got it."""
        event = ReplyEvent(run_id=run_id, kind=kind, text=text)  # type: ignore[arg-type]
        listeners = list(self.listeners.get(session_key, []))
        for listener in listeners:
            listener(event)
        return len(listeners)

    # -- DedupeStore ---------------------------------------------------------------------------

    async def dedupe_seen(self, platform: str, account_id: str, event_id: str) -> bool:
        expires = self.seen.get((platform, account_id, event_id))
        return expires is not None and expires > self._clock()

    async def dedupe_remember(self, platform: str, account_id: str, event_id: str, ttl_s: float) -> None:
        key = (platform, account_id, event_id)
        self.seen[key] = max(self.seen.get(key, 0.0), self._clock() + ttl_s)

    # -- OutboxStore ---------------------------------------------------------------------------

    async def outbox_put(self, record: OutboxRecord) -> None:
        self.outbox[record.key] = record

    async def outbox_update(
        self,
        key: str,
        *,
        state: OutboxState,
        text: str | None = None,
        platform_message_id: str | None = None,
    ) -> None:
        record = self.outbox[key]
        self.outbox[key] = replace(
            record,
            state=state,
            text=record.text if text is None else text,
            platform_message_id=record.platform_message_id
            if platform_message_id is None
            else platform_message_id,
        )

    async def outbox_pending(self, platform: str, account_id: str) -> list[OutboxRecord]:
        return [
            r
            for r in self.outbox.values()
            if r.platform == platform and r.account_id == account_id and r.state not in ("final", "failed")
        ]

    # -- CursorStore ---------------------------------------------------------------------------

    async def channel_cursors(self, platform: str, account_id: str) -> dict[str, str]:
        return dict(self.cursors.get((platform, account_id), {}))

    async def set_channel_cursor(
        self, platform: str, account_id: str, channel_id: str, message_id: str
    ) -> None:
        self.cursors.setdefault((platform, account_id), {})[channel_id] = message_id

    # -- PairingStore --------------------------------------------------------------------------

    async def pairing_request(
        self,
        platform: str,
        account_id: str,
        sender_id: str,
        sender_name: str = "",
        reply_route: ReplyRoute | None = None,
    ) -> PairingRequest | None:
        now = self._clock()
        live = {
            code: r
            for code, r in self.pairings.items()
            if r.approved or (now * 1000 - r.created_at_ms) < PAIRING_TTL_S * 1000
        }
        self.pairings = live
        for request in live.values():
            same = (request.platform, request.account_id, request.sender_id) == (
                platform,
                account_id,
                sender_id,
            )
            if same and not request.approved:
                return replace(request, is_new=False)
        pending = [
            r
            for r in live.values()
            if r.platform == platform and r.account_id == account_id and not r.approved
        ]
        if len(pending) >= PAIRING_MAX_PENDING:
            return None
        code = new_pairing_code()
        request = PairingRequest(
            code=code,
            platform=platform,  # type: ignore[arg-type]
            account_id=account_id,
            sender_id=sender_id,
            sender_name=sender_name,
            created_at_ms=int(now * 1000),
            reply_route=reply_route,
        )
        self.pairings[code] = request
        return replace(request, is_new=True)

    async def pairing_is_approved(self, platform: str, account_id: str, sender_id: str) -> bool:
        return (platform, account_id, sender_id) in self.approved

    async def pairing_list(self) -> list[PairingRequest]:
        return list(self.pairings.values())

    async def pairing_approve(
        self, code: str, *, platform: str | None = None, account_id: str | None = None
    ) -> PairingRequest | None:
        request = self.pairings.get(code.upper())
        now = self._clock()
        if request is None or request.approved or now * 1000 - request.created_at_ms >= PAIRING_TTL_S * 1000:
            return None
        if platform not in (None, request.platform) or account_id not in (None, request.account_id):
            return None
        approved = replace(request, approved=True)
        self.pairings[code.upper()] = approved
        self.approved.add((request.platform, request.account_id, request.sender_id))
        return approved

    # -- StateReporter -------------------------------------------------------------------------

    def report_state(self, binding_id: str, state: str, last_inbound_at: float | None) -> None:
        self.states.append((binding_id, state, last_inbound_at))

    def state_history(self, binding_id: str) -> list[str]:
        """The distinct states reported for `binding_id`, in order, without repeats in a row."""
        out: list[str] = []
        for bid, state, _ in self.states:
            if bid == binding_id and (not out or out[-1] != state):
                out.append(state)
        return out


def platform_of(value: str) -> Platform:
    assert value in ("discord", "slack")
    return value  # type: ignore[return-value]
