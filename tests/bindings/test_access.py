"""Access control before routing: DM policies, pairing, group policy, mentions."""

from __future__ import annotations

import pytest

from bindings.access import (
    PAIRING_ALPHABET,
    PAIRING_CODE_LENGTH,
    AccessPolicy,
    AccessRequest,
    ChannelAccess,
    check_access,
    decide,
    new_pairing_code,
)
from tests.bindings.memory_host import MemoryHost


def dm(sender: str = "u1") -> AccessRequest:
    return AccessRequest(chat_type="direct", sender_id=sender, channel_id="d1")


def group(
    channel: str = "c1", *, mentioned: bool = False, sender: str = "u1", parent: str | None = None
) -> AccessRequest:
    return AccessRequest(
        chat_type="channel",
        sender_id=sender,
        channel_id=channel,
        parent_channel_id=parent,
        mentioned=mentioned,
    )


def test_dm_policies() -> None:
    pairing = AccessPolicy(dm_policy="pairing", allow_from=frozenset({"owner"}))
    assert decide(pairing, dm("owner")).verdict == "allow"
    assert decide(pairing, dm("stranger")).verdict == "pair"
    assert decide(pairing, dm("stranger"), paired=True).verdict == "allow"
    allowlist = AccessPolicy(dm_policy="allowlist", allow_from=frozenset({"owner"}))
    assert decide(allowlist, dm("owner")).verdict == "allow"
    assert decide(allowlist, dm("stranger"), paired=True).verdict == "deny"
    assert (
        decide(AccessPolicy(dm_policy="open", allow_from=frozenset({"*"})), dm("anyone")).verdict == "allow"
    )


def test_group_policies_and_mentions() -> None:
    assert decide(AccessPolicy(group_policy="disabled", require_mention=False), group()).verdict == "deny"
    allowlist = AccessPolicy(
        group_policy="allowlist",
        channels={"c1": ChannelAccess(require_mention=False), "c2": ChannelAccess(enabled=False)},
    )
    assert decide(allowlist, group("c1")).verdict == "allow"
    assert decide(allowlist, group("c2")).verdict == "deny"
    assert decide(allowlist, group("c3", mentioned=True)).verdict == "deny"
    assert decide(allowlist, group("thread", parent="c1")).verdict == "allow", "threads inherit their parent"
    open_ = AccessPolicy(group_policy="open", require_mention=True)
    assert decide(open_, group()).reason == "the bot was not mentioned"
    assert decide(open_, group(mentioned=True)).verdict == "allow"
    users = AccessPolicy(
        group_policy="open", require_mention=False, channels={"c1": ChannelAccess(users=frozenset({"u2"}))}
    )
    assert decide(users, group(sender="u1")).verdict == "deny"
    assert decide(users, group(sender="u2")).verdict == "allow"


async def test_check_access_consults_pairing_only_when_needed() -> None:
    host = MemoryHost()
    policy = AccessPolicy(dm_policy="pairing")
    decision = await check_access(policy, dm("u9"), pairing=host, platform="discord", account_id="default")
    assert decision.verdict == "pair"
    request = await host.pairing_request("discord", "default", "u9")
    assert request is not None and request.is_new
    await host.pairing_approve(request.code)
    decision = await check_access(policy, dm("u9"), pairing=host, platform="discord", account_id="default")
    assert decision.verdict == "allow"
    decision = await check_access(policy, dm("u9"), pairing=host, platform="slack", account_id="default")
    assert decision.verdict == "pair", "approval is per platform and account"


async def test_pairing_requests_are_limited_and_stable() -> None:
    host = MemoryHost()
    first = await host.pairing_request("slack", "default", "a")
    again = await host.pairing_request("slack", "default", "a")
    assert first is not None and again is not None
    assert first.code == again.code and first.is_new and not again.is_new
    await host.pairing_request("slack", "default", "b")
    await host.pairing_request("slack", "default", "c")
    assert await host.pairing_request("slack", "default", "d") is None


@pytest.mark.parametrize("_", range(20))
def test_pairing_codes_avoid_ambiguous_characters(_: int) -> None:
    code = new_pairing_code()
    assert len(code) == PAIRING_CODE_LENGTH
    assert set(code) <= set(PAIRING_ALPHABET)
    assert not set(code) & set("0O1I")
