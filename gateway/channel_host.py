"""`ChannelHost`: one binding's view of the daemon, the `bindings.BindingHost` it is given.

- `submit` records the message as a session input (`ChannelInputs`) before it returns;
- `subscribe_replies` is fed by the bridge through `ReplyFeed`: only runs the binding owns;
- dedupe, outbox, pairing and cursors are durable (`ChannelStore`);
- `report_state` feeds `channels.status`.

While the gateway drains (`ChannelInputs.accepting` false), the host takes no new messages and
records nothing for them (`submit` answers `rejected`; no dedupe row, no cursor move): Discord's
catch-up picks them up after the restart, and Slack, left unacknowledged, delivers them again.
"""

from __future__ import annotations

from collections.abc import Callable

from bindings import (
    InboundMessage,
    OutboxRecord,
    OutboxState,
    PairingRequest,
    ReplyListener,
    ReplyRoute,
    SubmitResult,
)
from gateway.channel_inputs import ChannelInputs
from gateway.channel_replies import ReplyFeed
from gateway.channel_store import ChannelStore

StateReport = Callable[[str, str, float | None], None]
"""`(binding id, connection state, Unix time of the last inbound frame or None)`."""


class ChannelHost:
    """The host of binding `binding_id`: `inputs` takes its messages, `feed` its replies, `store`
    its durable state, and `report_state` its connection state."""

    def __init__(
        self,
        binding_id: str,
        *,
        inputs: ChannelInputs,
        feed: ReplyFeed,
        store: ChannelStore,
        report_state: StateReport,
    ) -> None:
        self._binding_id = binding_id
        self._inputs = inputs
        self._feed = feed
        self._store = store
        self._report_state = report_state

    async def submit(self, inbound: InboundMessage) -> SubmitResult:
        return await self._inputs.submit(self._binding_id, inbound)

    def subscribe_replies(self, session_key: str, listener: ReplyListener) -> Callable[[], None]:
        return self._feed.subscribe(self._binding_id, session_key, listener)

    async def dedupe_seen(self, platform: str, account_id: str, event_id: str) -> bool:
        return await self._store.dedupe_seen(platform, account_id, event_id)

    async def dedupe_remember(self, platform: str, account_id: str, event_id: str, ttl_s: float) -> None:
        if self._inputs.accepting:  # while draining nothing is recorded (see the module docstring)
            await self._store.dedupe_remember(platform, account_id, event_id, ttl_s)

    async def outbox_put(self, record: OutboxRecord) -> None:
        await self._store.outbox_put(record)

    async def outbox_update(
        self,
        key: str,
        *,
        state: OutboxState,
        text: str | None = None,
        platform_message_id: str | None = None,
    ) -> None:
        await self._store.outbox_update(key, state=state, text=text, platform_message_id=platform_message_id)

    async def outbox_pending(self, platform: str, account_id: str) -> list[OutboxRecord]:
        return await self._store.outbox_pending(platform, account_id)

    async def channel_cursors(self, platform: str, account_id: str) -> dict[str, str]:
        return await self._store.channel_cursors(platform, account_id)

    async def set_channel_cursor(
        self, platform: str, account_id: str, channel_id: str, message_id: str
    ) -> None:
        if self._inputs.accepting:
            await self._store.set_channel_cursor(platform, account_id, channel_id, message_id)

    async def pairing_request(
        self,
        platform: str,
        account_id: str,
        sender_id: str,
        sender_name: str = "",
        reply_route: ReplyRoute | None = None,
    ) -> PairingRequest | None:
        return await self._store.pairing_request(platform, account_id, sender_id, sender_name, reply_route)

    async def pairing_is_approved(self, platform: str, account_id: str, sender_id: str) -> bool:
        return await self._store.pairing_is_approved(platform, account_id, sender_id)

    async def pairing_list(self) -> list[PairingRequest]:
        return await self._store.pairing_list()

    async def pairing_approve(
        self, code: str, *, platform: str | None = None, account_id: str | None = None
    ) -> PairingRequest | None:
        return await self._store.pairing_approve(code, platform=platform, account_id=account_id)

    def report_state(self, binding_id: str, state: str, last_inbound_at: float | None) -> None:
        self._report_state(binding_id, state, last_inbound_at)
