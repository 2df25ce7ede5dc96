"""The operator's side of pairing: listing the requests and approving one (`pairing.list`,
`pairing.approve`, `gatewayctl pairing`).

Requests and approvals are durable (`ChannelStore`). After an approval the sender is told, as a
courtesy, by the binding they wrote to; that message is sent in the background by a task this
object owns, and `aclose()` cancels the ones still running. A failed announcement is logged; the
approval stands either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from bindings import PairingRequest
from gateway.channel_store import ChannelStore

log = structlog.get_logger("gateway.channels")


class Announcer(Protocol):
    """A binding that can tell a sender their pairing was approved."""

    binding_id: str

    async def announce_approval(self, request: PairingRequest) -> bool: ...


class Pairing:
    """Pairing requests in `store`; `announcer(binding_id)` is the binding that tells a sender
    about their approval, or None when there is none (or no more announcements are wanted)."""

    def __init__(self, store: ChannelStore, announcer: Callable[[str], Announcer | None]) -> None:
        self._store = store
        self._announcer = announcer
        self._announcements: set[asyncio.Task[None]] = set()

    async def requests(self) -> list[dict[str, Any]]:
        """The requests waiting for approval, oldest first, as `pairing.list` rows."""
        return [_pairing_row(request) for request in await self._store.pairing_list()]

    async def approve(
        self, code: str, *, channel: str | None = None, account_id: str | None = None
    ) -> dict[str, Any] | None:
        """Approve a pairing request (of `channel` and `account_id` when given) and tell the
        sender, in the background, where they wrote from. None when no live request matches."""
        request = await self._store.pairing_approve(code, platform=channel, account_id=account_id)
        if request is None:
            return None
        log.info(
            "pairing approved", channel=request.platform, account=request.account_id, sender=request.sender_id
        )
        binding = self._announcer(f"{request.platform}:{request.account_id}")
        if binding is not None:
            task = asyncio.create_task(self._announce(binding, request), name=f"pairing:{request.code}")
            self._announcements.add(task)
            task.add_done_callback(self._announcements.discard)
        return _pairing_row(request)

    async def _announce(self, binding: Announcer, request: PairingRequest) -> None:
        try:
            await binding.announce_approval(request)
        except Exception as exc:  # the approval stands; only the courtesy message is lost
            log.warning(
                "could not tell the sender about the approval", binding=binding.binding_id, error=repr(exc)
            )

    async def aclose(self) -> None:
        """Cancel the announcements still running and wait for them. Idempotent."""
        for announcement in list(self._announcements):
            announcement.cancel()
        await asyncio.gather(*self._announcements, return_exceptions=True)


def _pairing_row(request: PairingRequest) -> dict[str, Any]:
    return {
        "code": request.code,
        "channel": request.platform,
        "accountId": request.account_id,
        "senderId": request.sender_id,
        "senderName": request.sender_name,
        "createdAt": request.created_at_ms,
        "approved": request.approved,
    }
