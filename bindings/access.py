"""Who may talk to the agent through a binding. Runs before routing: rules route, they do not
grant access.

Direct messages follow the DM policy:

- `pairing` (default): a sender in `allow_from` or approved by an operator passes; anyone else
  gets a short code and nothing runs until `pairing approve <code>`.
- `allowlist`: only senders in `allow_from`.
- `open`: everyone (the configuration must then list `"*"` in `allow_from`, so opening a bot to
  the world is always written down).

Group and channel messages follow the group policy (`open`, `allowlist`: only the channels listed
under `channels`, `disabled`), then the channel's `enabled` and `users`, then the mention
requirement: the bot must be mentioned or replied to. A thread uses its parent channel's entry
when it has none of its own.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from bindings.host import PairingStore, Platform
from bindings.routing import PeerKind

DmPolicy: TypeAlias = Literal["pairing", "allowlist", "open"]
GroupPolicy: TypeAlias = Literal["open", "allowlist", "disabled"]
Verdict: TypeAlias = Literal["allow", "pair", "deny"]

PAIRING_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
"""No 0, O, 1 or I: codes are read aloud and typed by hand."""
PAIRING_CODE_LENGTH = 8
PAIRING_TTL_S = 3600
PAIRING_MAX_PENDING = 3
"""Pending requests per account; more unknown senders are ignored until one is settled."""


def new_pairing_code() -> str:
    """A random pairing code (8 characters of `PAIRING_ALPHABET`)."""
    return "".join(secrets.choice(PAIRING_ALPHABET) for _ in range(PAIRING_CODE_LENGTH))


def pairing_reply_text(platform: Platform, code: str) -> str:
    """What an unknown DM sender is told."""
    return (
        f"I don't know you yet. Your pairing code is {code}. "
        f"Ask the operator to run: gatewayctl pairing approve {platform} {code}"
    )


PAIRING_APPROVED_TEXT = "You have been approved. Send your message again and I will answer."
"""What a sender is told once an operator approved their pairing code."""


@dataclass(frozen=True, kw_only=True)
class ChannelAccess:
    """Per-channel settings. `require_mention=None` inherits the account's setting; `users`
    (when set) limits who may trigger the agent in that channel."""

    enabled: bool = True
    require_mention: bool | None = None
    users: frozenset[str] | None = None


@dataclass(frozen=True, kw_only=True)
class AccessPolicy:
    dm_policy: DmPolicy = "pairing"
    allow_from: frozenset[str] = frozenset()
    group_policy: GroupPolicy = "allowlist"
    require_mention: bool = True
    channels: Mapping[str, ChannelAccess] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AccessRequest:
    chat_type: PeerKind
    sender_id: str
    channel_id: str
    parent_channel_id: str | None = None
    mentioned: bool = False
    """The bot was mentioned, or the message replies to one of the bot's messages."""


@dataclass(frozen=True, kw_only=True)
class AccessDecision:
    verdict: Verdict
    reason: str


def _channel_entry(policy: AccessPolicy, request: AccessRequest) -> ChannelAccess | None:
    entry = policy.channels.get(request.channel_id)
    if entry is None and request.parent_channel_id is not None:
        entry = policy.channels.get(request.parent_channel_id)
    return entry


def decide(policy: AccessPolicy, request: AccessRequest, *, paired: bool = False) -> AccessDecision:
    """The access verdict for `request`. `paired` says whether an operator approved the sender
    (only consulted for DMs under the `pairing` policy). Pure: no I/O."""
    if request.chat_type == "direct":
        return _decide_direct(policy, request, paired=paired)
    if policy.group_policy == "disabled":
        return AccessDecision(verdict="deny", reason="group messages are disabled")
    entry = _channel_entry(policy, request)
    if entry is None and policy.group_policy == "allowlist":
        return AccessDecision(verdict="deny", reason="channel is not in the allowlist")
    if entry is not None and not entry.enabled:
        return AccessDecision(verdict="deny", reason="channel is disabled")
    if entry is not None and entry.users is not None and request.sender_id not in entry.users:
        return AccessDecision(verdict="deny", reason="sender may not use this channel")
    require = policy.require_mention
    if entry is not None and entry.require_mention is not None:
        require = entry.require_mention
    if require and not request.mentioned:
        return AccessDecision(verdict="deny", reason="the bot was not mentioned")
    return AccessDecision(verdict="allow", reason="group policy")


def _decide_direct(policy: AccessPolicy, request: AccessRequest, *, paired: bool) -> AccessDecision:
    listed = request.sender_id in policy.allow_from or "*" in policy.allow_from
    if policy.dm_policy == "open":
        return AccessDecision(verdict="allow", reason="open DMs")
    if listed:
        return AccessDecision(verdict="allow", reason="sender is in allow_from")
    if policy.dm_policy == "allowlist":
        return AccessDecision(verdict="deny", reason="sender is not in allow_from")
    if paired:
        return AccessDecision(verdict="allow", reason="sender is paired")
    return AccessDecision(verdict="pair", reason="sender must pair first")


def needs_pairing_lookup(policy: AccessPolicy, request: AccessRequest) -> bool:
    """Whether `decide` depends on `paired` for this request."""
    return (
        request.chat_type == "direct"
        and policy.dm_policy == "pairing"
        and request.sender_id not in policy.allow_from
        and "*" not in policy.allow_from
    )


async def check_access(
    policy: AccessPolicy,
    request: AccessRequest,
    *,
    pairing: PairingStore,
    platform: Platform,
    account_id: str,
) -> AccessDecision:
    """`decide`, asking the pairing store only when the verdict depends on it."""
    paired = False
    if needs_pairing_lookup(policy, request):
        paired = await pairing.pairing_is_approved(platform, account_id, request.sender_id)
    return decide(policy, request, paired=paired)
