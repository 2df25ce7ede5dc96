"""Which agent answers a chat message, and under which session key.

Routing follows OpenClaw's tiers: the first tier with a matching rule wins, and within a tier the
order of the configuration decides.

1. `binding.peer`          the exact peer (a DM partner, a channel, a group)
2. `binding.peer.parent`   the parent peer of a thread (threads inherit their channel's agent)
3. `binding.peer.wildcard` `peer.id = "*"` for that kind of peer
4. `binding.guild+roles`   a Discord guild plus one of the member's roles
5. `binding.guild`         a Discord guild
6. `binding.team`          a Slack workspace
7. `binding.account`       one account of the platform (no account in the rule = the default one)
8. `binding.channel`       every account of the platform (`account_id = "*"`)
9. `default`               the default agent

Every field a rule names must match. Rules are not access control: `bindings.access` runs first.

Session keys follow OpenClaw's grammar (all lower case): `agent:<agent>:main`,
`agent:<agent>:direct:<peer>`, `agent:<agent>:<channel>:direct:<peer>`,
`agent:<agent>:<channel>:<account>:direct:<peer>` (DMs, by DM scope),
`agent:<agent>:<channel>:group:<id>`, `agent:<agent>:<channel>:channel:<id>`, and a
`:thread:<id>` suffix for threads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from bindings.errors import RoutingError

DEFAULT_AGENT_ID = "main"
DEFAULT_ACCOUNT_ID = "default"
DEFAULT_MAIN_KEY = "main"

DmScope: TypeAlias = Literal["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]
PeerKind: TypeAlias = Literal["direct", "group", "channel"]
MatchedBy: TypeAlias = Literal[
    "binding.peer",
    "binding.peer.parent",
    "binding.peer.wildcard",
    "binding.guild+roles",
    "binding.guild",
    "binding.team",
    "binding.account",
    "binding.channel",
    "default",
]

_AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Peer(_Model):
    """A conversation partner: a DM user (`direct`), a group DM (`group`) or a channel."""

    kind: PeerKind
    id: str


class RouteMatch(_Model):
    """What a rule matches. `channel` is the platform (`discord`, `slack`)."""

    channel: str
    account_id: str | None = None
    peer: Peer | None = None
    guild_id: str | None = None
    team_id: str | None = None
    roles: tuple[str, ...] = ()


class SessionScope(_Model):
    dm_scope: DmScope | None = None


class RouteRule(_Model):
    """`{agent_id, match, session?}`: send what `match` describes to `agent_id`."""

    agent_id: str
    match: RouteMatch
    session: SessionScope | None = None
    comment: str | None = Field(default=None, exclude=True)

    @field_validator("agent_id")
    @classmethod
    def _valid_agent(cls, value: str) -> str:
        try:
            return normalize_agent_id(value)
        except RoutingError as exc:
            raise ValueError(str(exc)) from exc


@dataclass(frozen=True, kw_only=True)
class RouteInput:
    """The facts of one inbound message that routing looks at.

    `peer` is where the message was written (on Discord a thread is its own channel peer);
    `parent_peer` is the thread's parent channel; `thread_id` names the thread for the session key
    (Discord: the thread channel id; Slack: the thread's `thread_ts`).
    """

    channel: str
    account_id: str
    peer: Peer
    parent_peer: Peer | None = None
    thread_id: str | None = None
    guild_id: str | None = None
    team_id: str | None = None
    member_roles: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ResolvedRoute:
    agent_id: str
    channel: str
    account_id: str
    session_key: str
    main_session_key: str
    matched_by: MatchedBy
    dm_scope: DmScope


def normalize_agent_id(agent_id: str) -> str:
    """Lower-case `agent_id`; raises `RoutingError` if it breaks `^[a-z0-9][a-z0-9_-]{0,63}$`."""
    value = agent_id.strip().lower()
    if not _AGENT_ID.match(value):
        raise RoutingError(f"invalid agent id {agent_id!r}: expected [a-z0-9][a-z0-9_-]{{0,63}}")
    return value


def _segment(value: str, what: str) -> str:
    text = value.strip().lower()
    if not text or ":" in text:
        raise RoutingError(f"invalid {what} {value!r} for a session key")
    return text


def main_session_key(agent_id: str, main_key: str = DEFAULT_MAIN_KEY) -> str:
    return f"agent:{normalize_agent_id(agent_id)}:{_segment(main_key, 'main key')}"


def build_session_key(
    *,
    agent_id: str,
    channel: str,
    account_id: str,
    peer: Peer,
    dm_scope: DmScope = "main",
    thread_id: str | None = None,
    main_key: str = DEFAULT_MAIN_KEY,
) -> str:
    """The session key of a conversation. DMs follow `dm_scope`; a thread of a group or channel
    gets its own key (`...:thread:<id>`); a DM keeps one key whatever thread it is in."""
    agent = normalize_agent_id(agent_id)
    if peer.kind == "direct":
        peer_id = _segment(peer.id, "peer id")
        if dm_scope == "main":
            return main_session_key(agent, main_key)
        if dm_scope == "per-peer":
            return f"agent:{agent}:direct:{peer_id}"
        ch = _segment(channel, "channel")
        if dm_scope == "per-channel-peer":
            return f"agent:{agent}:{ch}:direct:{peer_id}"
        return f"agent:{agent}:{ch}:{_segment(account_id, 'account id')}:direct:{peer_id}"
    key = f"agent:{agent}:{_segment(channel, 'channel')}:{peer.kind}:{_segment(peer.id, 'peer id')}"
    if thread_id is not None:
        key += f":thread:{_segment(thread_id, 'thread id')}"
    return key


SessionKeyKind: TypeAlias = Literal["main", "direct", "group", "channel", "other"]


@dataclass(frozen=True, kw_only=True)
class SessionKey:
    """A parsed session key. Keys this grammar does not describe parse as kind `other`."""

    agent_id: str
    kind: SessionKeyKind
    rest: str
    channel: str | None = None
    account_id: str | None = None
    peer_id: str | None = None
    thread_id: str | None = None


def parse_session_key(key: str, *, main_key: str = DEFAULT_MAIN_KEY) -> SessionKey:
    """Parse `agent:<agent>:<rest>`. Raises `RoutingError` if `key` is not an agent key."""
    parts = key.strip().lower().split(":")
    if len(parts) < 3 or parts[0] != "agent" or any(not p for p in parts):
        raise RoutingError(f"not an agent session key: {key!r}")
    agent = normalize_agent_id(parts[1])
    rest = parts[2:]
    text = ":".join(rest)
    direct = ("direct", "dm")
    if rest == [main_key.lower()]:
        return SessionKey(agent_id=agent, kind="main", rest=text)
    if len(rest) == 2 and rest[0] in direct:
        return SessionKey(agent_id=agent, kind="direct", rest=text, peer_id=rest[1])
    if len(rest) == 3 and rest[1] in direct:
        return SessionKey(agent_id=agent, kind="direct", rest=text, channel=rest[0], peer_id=rest[2])
    if len(rest) == 4 and rest[2] in direct:
        return SessionKey(
            agent_id=agent, kind="direct", rest=text, channel=rest[0], account_id=rest[1], peer_id=rest[3]
        )
    if len(rest) in (3, 5) and rest[1] in ("group", "channel"):
        thread: str | None = None
        if len(rest) == 5:
            if rest[3] != "thread":
                return SessionKey(agent_id=agent, kind="other", rest=text)
            thread = rest[4]
        kind: SessionKeyKind = "group" if rest[1] == "group" else "channel"
        return SessionKey(
            agent_id=agent, kind=kind, rest=text, channel=rest[0], peer_id=rest[2], thread_id=thread
        )
    return SessionKey(agent_id=agent, kind="other", rest=text)


def _account_matches(rule: RouteMatch, account_id: str) -> bool:
    if rule.account_id is None:
        return account_id == DEFAULT_ACCOUNT_ID
    return rule.account_id in ("*", account_id)


def _tier_of(match: RouteMatch) -> int:
    """The tier a rule belongs to: its most specific field. Peer rules are tiers 1-3."""
    if match.peer is not None:
        return 3 if match.peer.id == "*" else 1
    if match.guild_id is not None:
        return 4 if match.roles else 5
    if match.team_id is not None:
        return 6
    if match.account_id is not None and match.account_id != "*":
        return 7
    return 8 if match.account_id == "*" else 7


def _common_fields_match(match: RouteMatch, inp: RouteInput) -> bool:
    if match.channel != inp.channel or not _account_matches(match, inp.account_id):
        return False
    if match.guild_id is not None and match.guild_id != inp.guild_id:
        return False
    if match.roles and not set(match.roles) & set(inp.member_roles):
        return False
    return match.team_id is None or match.team_id == inp.team_id


def _peer_equals(rule_peer: Peer, peer: Peer | None) -> bool:
    return peer is not None and rule_peer.kind == peer.kind and rule_peer.id == peer.id


def _find(rules: Sequence[RouteRule], inp: RouteInput) -> tuple[RouteRule, MatchedBy] | None:
    candidates = [r for r in rules if _common_fields_match(r.match, inp)]
    exact = [r for r in candidates if _tier_of(r.match) == 1]
    for rule in exact:
        if rule.match.peer is not None and _peer_equals(rule.match.peer, inp.peer):
            return rule, "binding.peer"
    for rule in exact:
        if rule.match.peer is not None and _peer_equals(rule.match.peer, inp.parent_peer):
            return rule, "binding.peer.parent"
    tiers: list[tuple[int, MatchedBy]] = [
        (3, "binding.peer.wildcard"),
        (4, "binding.guild+roles"),
        (5, "binding.guild"),
        (6, "binding.team"),
        (7, "binding.account"),
        (8, "binding.channel"),
    ]
    for tier, name in tiers:
        for rule in candidates:
            if _tier_of(rule.match) != tier:
                continue
            if tier == 3 and (rule.match.peer is None or rule.match.peer.kind != inp.peer.kind):
                continue
            return rule, name
    return None


def resolve_route(
    rules: Sequence[RouteRule],
    inp: RouteInput,
    *,
    default_agent_id: str = DEFAULT_AGENT_ID,
    dm_scope: DmScope = "main",
    main_key: str = DEFAULT_MAIN_KEY,
    identity_links: Mapping[str, str] | None = None,
) -> ResolvedRoute:
    """Pick the agent and session key for `inp`.

    `identity_links` maps `"<channel>:<peer id>"` to a canonical peer id, so one person reaching
    the agent from two accounts can share a DM session. Raises `RoutingError` for an invalid agent
    id (in a rule or the default).
    """
    found = _find(rules, inp)
    matched_by: MatchedBy = "default"
    if found is None:
        agent_id, scope = normalize_agent_id(default_agent_id), dm_scope
    else:
        rule, matched_by = found
        agent_id = normalize_agent_id(rule.agent_id)
        scope = rule.session.dm_scope if rule.session and rule.session.dm_scope else dm_scope
    peer = inp.peer
    if inp.thread_id is not None and inp.parent_peer is not None:
        peer = inp.parent_peer
    if peer.kind == "direct" and identity_links:
        linked = identity_links.get(f"{inp.channel}:{peer.id}")
        if linked:
            peer = Peer(kind="direct", id=linked)
    key = build_session_key(
        agent_id=agent_id,
        channel=inp.channel,
        account_id=inp.account_id,
        peer=peer,
        dm_scope=scope,
        thread_id=inp.thread_id,
        main_key=main_key,
    )
    return ResolvedRoute(
        agent_id=agent_id,
        channel=inp.channel,
        account_id=inp.account_id,
        session_key=key,
        main_session_key=main_session_key(agent_id, main_key),
        matched_by=matched_by,
        dm_scope=scope,
    )
