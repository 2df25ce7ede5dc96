"""Routing tiers and the session-key grammar."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bindings.errors import RoutingError
from bindings.routing import (
    Peer,
    RouteInput,
    RouteRule,
    build_session_key,
    parse_session_key,
    resolve_route,
)


def rule(agent: str, **match: Any) -> RouteRule:
    return RouteRule.model_validate({"agent_id": agent, "match": {"channel": "discord", **match}})


CHANNEL_PEER = Peer(kind="channel", id="c1")
MSG = RouteInput(
    channel="discord",
    account_id="default",
    peer=Peer(kind="channel", id="t1"),
    parent_peer=CHANNEL_PEER,
    thread_id="t1",
    guild_id="g1",
    member_roles=("r1",),
)

# One rule per tier, listed in reverse order of precedence so config order cannot be what wins.
TIERS: list[tuple[str, RouteRule]] = [
    ("binding.channel", rule("a8", account_id="*")),
    ("binding.account", rule("a7", account_id="default")),
    ("binding.team", rule("a6", team_id="T1")),
    ("binding.guild", rule("a5", guild_id="g1")),
    ("binding.guild+roles", rule("a4", guild_id="g1", roles=["r1"])),
    ("binding.peer.wildcard", rule("a3", peer={"kind": "channel", "id": "*"})),
    ("binding.peer.parent", rule("a2", peer={"kind": "channel", "id": "c1"})),
    ("binding.peer", rule("a1", peer={"kind": "channel", "id": "t1"})),
]


@pytest.mark.parametrize("drop", range(len(TIERS) + 1))
def test_the_most_specific_tier_wins(drop: int) -> None:
    """With tiers 1..k removed, tier k+1 decides (team never matches a Discord message)."""
    inp = RouteInput(**{**MSG.__dict__, "team_id": "T1"})
    remaining = TIERS[: len(TIERS) - drop]
    route = resolve_route([r for _, r in remaining], inp)
    expected = remaining[-1][0] if remaining else "default"
    assert route.matched_by == expected
    assert route.agent_id == (remaining[-1][1].agent_id if remaining else "main")


def test_every_field_of_a_rule_must_match() -> None:
    rules = [
        rule("wrong-guild", peer={"kind": "channel", "id": "t1"}, guild_id="other"),
        rule("ok", guild_id="g1"),
    ]
    assert resolve_route(rules, MSG).agent_id == "ok"
    assert resolve_route([rule("roles", guild_id="g1", roles=["admin"])], MSG).matched_by == "default"
    slack_rule = RouteRule.model_validate({"agent_id": "s", "match": {"channel": "slack"}})
    assert resolve_route([slack_rule], MSG).matched_by == "default"


def test_within_a_tier_config_order_decides() -> None:
    rules = [rule("first", guild_id="g1"), rule("second", guild_id="g1")]
    assert resolve_route(rules, MSG).agent_id == "first"


def test_account_matching() -> None:
    other = RouteInput(channel="discord", account_id="work", peer=CHANNEL_PEER)
    assert resolve_route([rule("x")], other).matched_by == "default", "no account = the default account only"
    assert resolve_route([rule("x", account_id="work")], other).matched_by == "binding.account"
    assert resolve_route([rule("x", account_id="*")], other).matched_by == "binding.channel"


def test_wildcard_is_per_peer_kind() -> None:
    rules = [rule("dms", peer={"kind": "direct", "id": "*"})]
    assert resolve_route(rules, MSG).matched_by == "default"
    dm = RouteInput(channel="discord", account_id="default", peer=Peer(kind="direct", id="u1"))
    assert resolve_route(rules, dm).agent_id == "dms"


def test_session_keys_for_groups_channels_and_threads() -> None:
    assert resolve_route([], MSG).session_key == "agent:main:discord:channel:c1:thread:t1"
    plain = RouteInput(channel="discord", account_id="default", peer=CHANNEL_PEER)
    assert resolve_route([], plain).session_key == "agent:main:discord:channel:c1"
    group = RouteInput(channel="slack", account_id="default", peer=Peer(kind="group", id="G7"))
    assert resolve_route([], group).session_key == "agent:main:slack:group:g7"


@pytest.mark.parametrize(
    ("scope", "key"),
    [
        ("main", "agent:main:main"),
        ("per-peer", "agent:main:direct:u1"),
        ("per-channel-peer", "agent:main:discord:direct:u1"),
        ("per-account-channel-peer", "agent:main:discord:work:direct:u1"),
    ],
)
def test_dm_scopes(scope: Any, key: str) -> None:
    dm = RouteInput(channel="discord", account_id="work", peer=Peer(kind="direct", id="U1"))
    assert resolve_route([], dm, dm_scope=scope).session_key == key


def test_a_rule_can_override_the_dm_scope_and_identity_links_merge_peers() -> None:
    dm = RouteInput(channel="slack", account_id="default", peer=Peer(kind="direct", id="U1"))
    scoped = RouteRule.model_validate(
        {
            "agentId": "ops",
            "match": {"channel": "slack", "peer": {"kind": "direct", "id": "U1"}},
            "session": {"dmScope": "per-peer"},
        }
    )
    assert resolve_route([scoped], dm).session_key == "agent:ops:direct:u1"
    linked = resolve_route([], dm, dm_scope="per-peer", identity_links={"slack:U1": "alice"})
    assert linked.session_key == "agent:main:direct:alice"


def test_invalid_agent_ids_are_refused() -> None:
    with pytest.raises(ValidationError, match="invalid agent id"):
        rule("Not Valid!")
    with pytest.raises(RoutingError, match="invalid agent id"):
        resolve_route([], MSG, default_agent_id="Not Valid!")
    with pytest.raises(RoutingError):
        build_session_key(
            agent_id="main", channel="discord", account_id="a", peer=Peer(kind="channel", id="a:b")
        )


def test_parser() -> None:
    assert parse_session_key("agent:main:main").kind == "main"
    thread = parse_session_key("agent:main:discord:channel:123456:thread:987654")
    assert (thread.kind, thread.channel, thread.peer_id, thread.thread_id) == (
        "channel",
        "discord",
        "123456",
        "987654",
    )
    dm = parse_session_key("agent:ops:slack:work:direct:u1")
    assert (dm.kind, dm.channel, dm.account_id, dm.peer_id) == ("direct", "slack", "work", "u1")
    legacy = parse_session_key("agent:main:dm:u1")
    assert (legacy.kind, legacy.peer_id) == ("direct", "u1")
    other = parse_session_key("agent:main:test-agent-rpc")
    assert other.kind == "other" and other.rest == "test-agent-rpc"
    assert parse_session_key("agent:main:subagent:abc-123").kind == "other"
    for bad in ("main", "agent:main", "agent::x", "cron:job"):
        with pytest.raises(RoutingError):
            parse_session_key(bad)


ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12)


@given(
    agent=st.from_regex(r"[a-z0-9][a-z0-9_-]{0,10}", fullmatch=True),
    channel=st.sampled_from(["discord", "slack"]),
    account=ids,
    kind=st.sampled_from(["direct", "group", "channel"]),
    peer=ids,
    thread=st.none() | ids,
    scope=st.sampled_from(["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]),
)
def test_built_keys_parse_back(
    agent: str, channel: str, account: str, kind: Any, peer: str, thread: str | None, scope: Any
) -> None:
    key = build_session_key(
        agent_id=agent,
        channel=channel,
        account_id=account,
        peer=Peer(kind=kind, id=peer),
        dm_scope=scope,
        thread_id=thread,
    )
    parsed = parse_session_key(key)
    assert parsed.agent_id == agent
    if kind == "direct":
        assert parsed.kind == ("main" if scope == "main" else "direct")
        if scope != "main":
            assert parsed.peer_id == peer
    else:
        assert (parsed.kind, parsed.channel, parsed.peer_id, parsed.thread_id) == (
            kind,
            channel,
            peer,
            thread,
        )
