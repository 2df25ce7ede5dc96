"""What a binding does with a chat message, whatever the platform: dedupe, access, routing,
submit, and wiring the session's replies to the relay.

Order matters. A message already handled stops first (`bindings.dedupe`: its id is remembered
only once the message is handled, so a message cut off by a crash runs when it is redelivered),
access runs before routing, and the relay learns the reply route and subscribes to the session
*before* the input is submitted, so the first delta of a run that starts at once already has
somewhere to go. The host records the input before `submit` returns; only then does the platform
get its acknowledgement (the caller's job), and a `rejected` outcome means nothing was recorded:
the caller should leave the platform unacknowledged so that it delivers the message again.

Subscriptions are kept for the `max_sessions` most recently active session keys; older ones are
unsubscribed (a conversation that resumes subscribes again with its next message).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal, TypeAlias

import structlog

from bindings.access import AccessRequest, check_access, pairing_reply_text
from bindings.config import AccountConfig
from bindings.dedupe import EventOnce
from bindings.host import (
    BindingHost,
    ChatType,
    InboundMessage,
    Platform,
    ReplyRoute,
    Sender,
    outbox_key,
)
from bindings.outbox import MessageTransport, ReplyRelay
from bindings.routing import Peer, RouteInput, resolve_route

log = structlog.get_logger("bindings.inbound")

Outcome: TypeAlias = Literal["submitted", "duplicate", "denied", "pairing", "rejected"]


@dataclass(frozen=True, kw_only=True)
class ChatMessage:
    """A platform message, parsed by its binding, before access control.

    `thread_id` names the thread for the session key (Discord: the thread channel; Slack: the
    `thread_ts`, or the message's own `ts` when replies start a thread). `peer_id` is the
    conversation partner for routing: the user for DMs, the channel otherwise.
    """

    message_id: str
    channel_id: str
    chat_type: ChatType
    peer_id: str
    text: str
    sender: Sender
    reply_route: ReplyRoute
    mentioned: bool = False
    parent_channel_id: str | None = None
    thread_id: str | None = None
    guild_id: str | None = None
    team_id: str | None = None
    member_roles: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SessionOrigin:
    """Where a session's conversation lives on this binding (for its channel tools)."""

    route: ReplyRoute
    last_message_id: str


class InboundPipeline:
    def __init__(
        self,
        *,
        platform: Platform,
        account_id: str,
        config: AccountConfig,
        host: BindingHost,
        relay: ReplyRelay,
        transport: MessageTransport,
        max_sessions: int = 1024,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._platform: Platform = platform
        self._account_id = account_id
        self._config = config
        self._policy = config.access_policy()
        self._host = host
        self._relay = relay
        self._transport = transport
        self._max_sessions = max_sessions
        self._wall_clock = wall_clock
        self._subscriptions: OrderedDict[str, Callable[[], None]] = OrderedDict()
        self._origins: OrderedDict[str, SessionOrigin] = OrderedDict()
        self._once = EventOnce(host, platform, account_id)

    def reconfigure(self, config: AccountConfig) -> None:
        """Use `config`'s access, routing and queueing settings from the next message on."""
        self._config = config
        self._policy = config.access_policy()

    def origin(self, session_key: str) -> SessionOrigin | None:
        """Where `session_key`'s messages came from on this binding, if they did."""
        return self._origins.get(session_key)

    def remember_origin(self, session_key: str, origin: SessionOrigin) -> None:
        """Remember where `session_key`'s conversation is (learned elsewhere, e.g. after a
        restart), unless a message has told us since."""
        if session_key not in self._origins:
            self._origins[session_key] = origin
            _trim(self._origins, self._max_sessions)

    @property
    def subscribed_sessions(self) -> int:
        return len(self._subscriptions)

    async def handle(self, msg: ChatMessage) -> Outcome:
        """Run one message through the pipeline. Raises only what the host raises."""
        outcome = await self._once.run(
            f"msg:{msg.channel_id}:{msg.message_id}", lambda: self._handle(msg), done=handled
        )
        return outcome or "duplicate"

    async def _handle(self, msg: ChatMessage) -> Outcome:
        decision = await check_access(
            self._policy,
            AccessRequest(
                chat_type=msg.chat_type,
                sender_id=msg.sender.id,
                channel_id=msg.channel_id,
                parent_channel_id=msg.parent_channel_id,
                mentioned=msg.mentioned,
            ),
            pairing=self._host,
            platform=self._platform,
            account_id=self._account_id,
        )
        if decision.verdict == "deny":
            log.debug("message ignored", channel=msg.channel_id, reason=decision.reason)
            return "denied"
        if decision.verdict == "pair":
            await self._offer_pairing(msg)
            return "pairing"
        return await self._submit(msg)

    async def _offer_pairing(self, msg: ChatMessage) -> None:
        request = await self._host.pairing_request(
            self._platform, self._account_id, msg.sender.id, msg.sender.name, reply_route=msg.reply_route
        )
        if request is None or not request.is_new:
            return
        key = outbox_key(self._platform, self._account_id, f"pairing:{msg.message_id}", 0)
        await self._transport.post_message(
            msg.reply_route, pairing_reply_text(self._platform, request.code), key=key
        )

    async def _submit(self, msg: ChatMessage) -> Outcome:
        peer = Peer(kind=msg.chat_type, id=msg.peer_id)
        parent = Peer(kind="channel", id=msg.parent_channel_id) if msg.parent_channel_id else None
        route = resolve_route(
            self._config.routes,
            RouteInput(
                channel=self._platform,
                account_id=self._account_id,
                peer=peer,
                parent_peer=parent,
                thread_id=msg.thread_id,
                guild_id=msg.guild_id,
                team_id=msg.team_id,
                member_roles=msg.member_roles,
            ),
            default_agent_id=self._config.default_agent_id,
            dm_scope=self._config.dm_scope,
        )
        key = route.session_key
        self._relay.bind(key, msg.reply_route)
        self._subscribe(key)
        _touch(self._origins, key, SessionOrigin(route=msg.reply_route, last_message_id=msg.message_id))
        _trim(self._origins, self._max_sessions)
        inbound = InboundMessage(
            platform=self._platform,
            account_id=self._account_id,
            agent_id=route.agent_id,
            session_key=key,
            text=msg.text,
            sender=msg.sender,
            chat_type=msg.chat_type,
            channel_id=msg.channel_id,
            message_id=msg.message_id,
            reply_route=msg.reply_route,
            thread_id=msg.thread_id,
            parent_channel_id=msg.parent_channel_id,
            guild_id=msg.guild_id,
            team_id=msg.team_id,
            queue_mode=self._config.queue_mode_for(msg.channel_id, msg.parent_channel_id),
            received_at_ms=int(self._wall_clock() * 1000),
        )
        result = await self._host.submit(inbound)
        if result.status == "rejected":
            log.warning("input rejected", session_key=key, reason=result.reason)
            return "rejected"
        if result.run_id is not None:
            self._relay.bind(key, msg.reply_route, result.run_id)
        return "submitted" if result.status == "accepted" else "duplicate"

    def _subscribe(self, session_key: str) -> None:
        if session_key in self._subscriptions:
            self._subscriptions.move_to_end(session_key)
            return
        self._subscriptions[session_key] = self._host.subscribe_replies(
            session_key, partial(self._relay.on_event, session_key)
        )
        while len(self._subscriptions) > self._max_sessions:
            _, unsubscribe = self._subscriptions.popitem(last=False)
            unsubscribe()

    def close(self) -> None:
        """Unsubscribe from every session (idempotent)."""
        while self._subscriptions:
            _, unsubscribe = self._subscriptions.popitem()
            unsubscribe()


def handled(outcome: Outcome | None) -> bool:
    """Whether an outcome settles its event (anything but `rejected`: nothing was recorded)."""
    return outcome != "rejected"


def _touch(cache: OrderedDict[str, SessionOrigin], key: str, value: SessionOrigin) -> None:
    cache[key] = value
    cache.move_to_end(key)


def _trim(cache: OrderedDict[str, SessionOrigin], cap: int) -> None:
    while len(cache) > cap:
        cache.popitem(last=False)
