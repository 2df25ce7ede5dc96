"""The seam between a binding and the daemon that hosts it.

A binding never imports `sessions` or `gateway`. It receives a `BindingHost` and calls only the
methods below; the gateway implements them over its database and hub. Each group of methods is
its own small Protocol so a test (or a component that needs only one of them) can supply just
that part; `BindingHost` is their union.

Durability promises the host must keep (the bindings rely on them):

- `submit` records the input (keyed by `InboundMessage.idempotency_key`) before it returns; a
  second submit with the same key answers `duplicate` and runs nothing. The binding acknowledges
  the platform only after `submit` returned.
- `dedupe_remember` keeps an event id for at least `ttl_s` (and `DEDUPE_TTL_S`), also across
  restarts; `dedupe_seen` answers whether it is kept. A binding remembers an event only once it
  is handled (see `bindings.dedupe`), so an event cut off by a crash is handled again when the
  platform redelivers it.
- Outbox records, channel cursors and pairing state survive restarts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

Platform: TypeAlias = Literal["discord", "slack"]
ChatType: TypeAlias = Literal["direct", "group", "channel"]
QueueModeName: TypeAlias = Literal["steer", "followup", "collect", "interrupt"]
ReplyKind: TypeAlias = Literal["delta", "final", "error", "aborted"]
OutboxState: TypeAlias = Literal["pending", "sent", "edited", "final", "failed"]
SubmitStatus: TypeAlias = Literal["accepted", "duplicate", "rejected"]

DEDUPE_TTL_S = 20 * 60
"""The shortest time an inbound event id is remembered (Slack's last retry lands near 5 min)."""


@dataclass(frozen=True, kw_only=True)
class Sender:
    """Who wrote an inbound message, as the platform names them."""

    id: str
    name: str
    is_bot: bool = False


@dataclass(frozen=True, kw_only=True)
class ReplyRoute:
    """Where replies to a conversation go. Replies always go back where the message came from.

    `channel_id` is the Discord channel (a thread is a channel there) or the Slack conversation.
    `thread_id` is Slack's `thread_ts` (None on Discord). `reply_to` is the platform id of the
    message being answered (Discord shows it as a reply on the first chunk).
    """

    platform: Platform
    account_id: str
    channel_id: str
    thread_id: str | None = None
    reply_to: str | None = None

    @property
    def key(self) -> str:
        """Stable name of the destination, used for rate-limit routes and logs."""
        return f"{self.platform}:{self.account_id}:{self.channel_id}:{self.thread_id or ''}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplyRoute:
        return cls(
            platform=data["platform"],
            account_id=str(data["account_id"]),
            channel_id=str(data["channel_id"]),
            thread_id=data.get("thread_id"),
            reply_to=data.get("reply_to"),
        )


def inbound_idempotency_key(platform: str, account_id: str, channel_id: str, message_id: str) -> str:
    """The input-ledger key of a platform message. Message ids are unique per channel on Slack
    (`ts`), so the channel is part of the key on both platforms."""
    return f"{platform}:{account_id}:{channel_id}:{message_id}"


@dataclass(frozen=True, kw_only=True)
class InboundMessage:
    """A chat message that passed access control and routing, ready to become a session input."""

    platform: Platform
    account_id: str
    agent_id: str
    session_key: str
    text: str
    sender: Sender
    chat_type: ChatType
    channel_id: str
    message_id: str
    reply_route: ReplyRoute
    thread_id: str | None = None
    parent_channel_id: str | None = None
    guild_id: str | None = None
    team_id: str | None = None
    queue_mode: QueueModeName | None = None
    """None: the session's own queue mode applies."""
    received_at_ms: int = 0

    @property
    def idempotency_key(self) -> str:
        return inbound_idempotency_key(self.platform, self.account_id, self.channel_id, self.message_id)


@dataclass(frozen=True, kw_only=True)
class SubmitResult:
    """What the host did with an input. `run_id` is the run that will answer it, when known
    (None while the input waits behind another run)."""

    status: SubmitStatus
    run_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReplyEvent:
    """One step of an agent's reply. `text` is cumulative: the whole reply so far."""

    run_id: str
    kind: ReplyKind
    text: str


ReplyListener: TypeAlias = Callable[[ReplyEvent], None]
"""Called synchronously, in order, for each reply event; it must not block (the relay only
stores the latest text and wakes its own task)."""


def outbox_key(platform: str, account_id: str, run_id: str, chunk_index: int) -> str:
    """The idempotency key of one reply chunk. Deterministic, so a retry after a restart reuses
    it; 25 characters, the longest nonce Discord accepts."""
    digest = hashlib.sha256(f"{platform}:{account_id}:{run_id}:{chunk_index}".encode()).hexdigest()
    return digest[:25]


@dataclass(frozen=True, kw_only=True)
class OutboxRecord:
    """One reply chunk on its way to a platform.

    Life: `pending` (written before the first send attempt) -> `sent` (the platform message
    exists) -> `edited` (while streaming) -> `final`. `failed` means the platform refused it for
    good (missing permission, deleted channel); it is not retried.
    """

    key: str
    platform: Platform
    account_id: str
    route: ReplyRoute
    run_id: str
    chunk_index: int
    text: str
    state: OutboxState = "pending"
    platform_message_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class PairingRequest:
    """An unknown DM sender waiting for an operator's `pairing approve <code>`."""

    code: str
    platform: Platform
    account_id: str
    sender_id: str
    sender_name: str = ""
    created_at_ms: int = 0
    approved: bool = False
    reply_route: ReplyRoute | None = None
    """Where the sender wrote from (the approval is announced there)."""
    is_new: bool = field(default=False, compare=False)
    """True when this call created the request (the binding then tells the sender the code)."""


class InboundSink(Protocol):
    async def submit(self, inbound: InboundMessage) -> SubmitResult:
        """Record the input durably (idempotent on `inbound.idempotency_key`), then answer."""
        ...


class ReplySource(Protocol):
    def subscribe_replies(self, session_key: str, listener: ReplyListener) -> Callable[[], None]:
        """Deliver the reply events of every run of `session_key` to `listener` until the
        returned function is called."""
        ...


class DedupeStore(Protocol):
    async def dedupe_seen(self, platform: str, account_id: str, event_id: str) -> bool:
        """Whether `event_id` is remembered (and has not expired)."""
        ...

    async def dedupe_remember(self, platform: str, account_id: str, event_id: str, ttl_s: float) -> None:
        """Remember `event_id` for `ttl_s`, at least `DEDUPE_TTL_S` (idempotent)."""
        ...


class OutboxStore(Protocol):
    async def outbox_put(self, record: OutboxRecord) -> None:
        """Insert `record` (or replace the one with the same key)."""
        ...

    async def outbox_update(
        self,
        key: str,
        *,
        state: OutboxState,
        text: str | None = None,
        platform_message_id: str | None = None,
    ) -> None:
        """Change the state of the record `key`; `text` and `platform_message_id` when given."""
        ...

    async def outbox_pending(self, platform: str, account_id: str) -> list[OutboxRecord]:
        """Records of that account that are not `final` or `failed`, oldest first."""
        ...


class CursorStore(Protocol):
    async def channel_cursors(self, platform: str, account_id: str) -> dict[str, str]:
        """The last message id seen per channel (for catch-up after downtime)."""
        ...

    async def set_channel_cursor(
        self, platform: str, account_id: str, channel_id: str, message_id: str
    ) -> None: ...


class PairingStore(Protocol):
    async def pairing_request(
        self,
        platform: str,
        account_id: str,
        sender_id: str,
        sender_name: str = "",
        reply_route: ReplyRoute | None = None,
    ) -> PairingRequest | None:
        """The pending request of that sender, created if needed (`is_new`, remembering
        `reply_route`). None when the account already has the maximum number of pending
        requests."""
        ...

    async def pairing_is_approved(self, platform: str, account_id: str, sender_id: str) -> bool: ...

    async def pairing_list(self) -> list[PairingRequest]: ...

    async def pairing_approve(
        self, code: str, *, platform: str | None = None, account_id: str | None = None
    ) -> PairingRequest | None:
        """Approve the pending, unexpired request with that code (of that platform and account,
        when given); None if there is none."""
        ...


class StateReporter(Protocol):
    def report_state(self, binding_id: str, state: str, last_inbound_at: float | None) -> None:
        """Record a binding's connection state and the wall-clock time (seconds) of the last
        frame it received, for `channels.status`. Must not block."""
        ...


class BindingHost(
    InboundSink, ReplySource, DedupeStore, OutboxStore, CursorStore, PairingStore, StateReporter, Protocol
):
    """Everything a binding needs from the daemon."""
