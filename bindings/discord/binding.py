"""`DiscordBinding`: one Discord bot account, from the Gateway (or the Interactions endpoint) in
to the host, and from the host's reply events out to the channel.

Tasks (all owned by the binding's main task and ended by `aclose()`): the gateway shell, the
event worker that handles dispatches one at a time in arrival order (fed through a bounded
queue of `EVENT_QUEUE_SIZE`; when it is full the shell stops reading, which is the
backpressure point: nothing is dropped), and the reply relay.

After a fresh session (READY, not RESUMED) the binding catches up: for every channel whose last
seen message id the host remembers, it fetches the newer messages (`GET
/channels/{id}/messages?after=`) and feeds them through the same pipeline, where the dedupe table
drops the ones already handled. Catch-up messages carry no member roles (REST does not return
them), so `guild+roles` routes cannot match them.

Approval button clicks come as `INTERACTION_CREATE` dispatches (answered through the interaction
callback) or on the Interactions endpoint (answered in its response); see
`bindings.discord.approval_buttons`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import httpx
import structlog
from starlette.types import ASGIApp

from bindings.approvals import ApprovalMessage
from bindings.base import ChannelToolText, ChatBinding
from bindings.config import DiscordAccountConfig
from bindings.discord import approval_buttons
from bindings.discord.gateway import DiscordGatewayProtocol, Dispatch, GatewayEvent, GatewayTimings, Ready
from bindings.discord.interactions import (
    APPLICATION_COMMAND,
    CHANNEL_MESSAGE_WITH_SOURCE,
    EPHEMERAL,
    InteractionsEndpoint,
    load_public_key,
)
from bindings.discord.messages import DM_TYPE, ChannelDirectory, ChannelInfo, parse_message, sender_of
from bindings.discord.rest import DiscordRest, snowflake_key
from bindings.discord.shell import GatewayShell
from bindings.discord.transport import DiscordTransport
from bindings.errors import (
    BindingConfigError,
    FatalCloseError,
    PlatformError,
    PlatformRequestError,
    PlatformUnavailableError,
)
from bindings.host import BindingHost, ChatType, ReplyRoute, outbox_key
from bindings.inbound import ChatMessage, Outcome, SessionOrigin
from bindings.ratelimit import RateLimiter
from bindings.routing import DEFAULT_ACCOUNT_ID
from bindings.state import StateMachine
from bindings.tools import file_bytes
from bindings.ws import Connector, SocketSettings, websockets_connector

log = structlog.get_logger("bindings.discord")

_MAX_CURSORS = 10_000

_INTERACTION_REPLIES: dict[Outcome, str] = {
    "submitted": "On it.",
    "duplicate": "Already received.",
    "denied": "You cannot use this here.",
    "pairing": "You need to pair first; check your messages.",
    "rejected": "The agent cannot take this right now.",
}


INTERACTION_MAX_AGE_S = 300.0
"""How far an interaction's signed timestamp may be from our clock (as Slack's Events API)."""


class DiscordBinding(ChatBinding[DiscordAccountConfig, GatewayEvent]):
    """A Discord bot account. Use `async with DiscordBinding(...)` or `start()` / `aclose()`.

    `http` is the httpx client every REST call goes through (its owner closes it). `env` holds
    the secrets (default: the process environment). `timings`, `connector` and `limiter` are
    seams for tests. Raises `BindingConfigError` when a secret is missing.
    """

    platform: Literal["discord"] = "discord"
    tool_text = ChannelToolText(
        react_description=(
            "React to a message in the Discord conversation this session came from "
            "(by default the latest message you received)."
        ),
        emoji_field=("emoji", "A Unicode emoji, or name:id for a custom one."),
        message_field="message_id",
        file_description="Upload a file to the Discord conversation this session came from.",
    )

    def __init__(
        self,
        config: DiscordAccountConfig,
        host: BindingHost,
        http: httpx.AsyncClient,
        *,
        account_id: str = DEFAULT_ACCOUNT_ID,
        env: Mapping[str, str] | None = None,
        timings: GatewayTimings | None = None,
        connector: Connector | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._timings = timings or GatewayTimings()
        token = config.bot_token(env)
        self._public_key = load_public_key(config.public_key(env)) if config.mode == "interactions" else None
        self.rest = DiscordRest(http, base_url=config.api_base_url, token=token, limiter=limiter)
        self.transport = DiscordTransport(self.rest)
        self.protocol = DiscordGatewayProtocol(token=token, intents=config.intents, timings=self._timings)
        super().__init__(
            config,
            host,
            account_id=account_id,
            transport=self.transport,
            chunk_limit=config.chunk_limit,
            machine=self.protocol.machine if config.mode == "gateway" else StateMachine(),
            connector=connector
            or websockets_connector(SocketSettings(close_timeout_s=self._timings.close_timeout_s)),
        )
        self._channels = ChannelDirectory(self.rest.get_channel)
        self._cursors: OrderedDict[str, int] = OrderedDict()
        self.user_id: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def _streaming(self) -> bool:
        return self._config.mode == "gateway"

    async def _run_socket_shell(self) -> None:
        shell = GatewayShell(
            self.protocol,
            discover=self._discover,
            on_event=self._events.put,
            connect=self._connector,
            on_frame=self._status.frame_received,
        )
        try:
            await shell.run()
        except FatalCloseError as exc:
            log.error(
                "discord closed the gateway for good",
                binding=self.binding_id,
                code=exc.code,
                reason=exc.reason,
            )
        except PlatformRequestError as exc:
            log.error("discord refused the gateway lookup", binding=self.binding_id, error=str(exc))

    async def _discover(self) -> str:
        """`GET /gateway/bot`, retried while Discord is unreachable; waits out an exhausted
        session-start budget."""
        delay = self._timings.reconnect_initial_s
        while True:
            try:
                info = await self.rest.get_gateway_bot()
            except PlatformUnavailableError as exc:
                log.warning("gateway lookup failed; retrying", error=str(exc), delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._timings.reconnect_max_s)
                continue
            if info.session_start_remaining == 0:
                await asyncio.sleep(info.session_start_reset_after_s)
            return info.url

    # -- inbound -----------------------------------------------------------------------------

    async def _handle_event(self, event: GatewayEvent) -> None:
        if isinstance(event, Ready):
            self.user_id = event.user_id
            if self._config.catch_up:
                await self._catch_up()
        elif isinstance(event, Dispatch):
            self._channels.learn(event.name, event.data)
            if event.name == "MESSAGE_CREATE" and isinstance(event.data, dict):
                await self._on_message(event.data)
            elif event.name == "INTERACTION_CREATE" and isinstance(event.data, dict):
                await self._on_gateway_interaction(event.data)

    async def _on_message(self, data: dict[str, Any], channel: ChannelInfo | None = None) -> Outcome | None:
        if self.user_id is None:
            return None
        channel_id = str(data["channel_id"])
        guild_id = str(data["guild_id"]) if data.get("guild_id") else None
        if channel is None:
            if guild_id is None:
                channel = ChannelInfo(id=channel_id, type=DM_TYPE)
            else:
                found = await self._channels.lookup(channel_id)
                channel = found or ChannelInfo(id=channel_id, type=0, guild_id=guild_id)
        msg = parse_message(
            data,
            account_id=self.account_id,
            bot_user_id=self.user_id,
            channel=channel,
            allow_bots=self._config.allow_bots,
            reply_in_thread=self._config.reply_in_thread_for,
        )
        outcome: Outcome | None = None
        if msg is not None:
            outcome = await self.pipeline.handle(self._engage(msg))
        await self._advance_cursor(channel_id, str(data["id"]))
        return outcome

    def _engage(self, msg: ChatMessage) -> ChatMessage:
        if msg.reply_route.thread_id is not None:
            self.transport.name_thread(msg.reply_route.thread_id, _thread_name(msg.text, msg.sender.name))
        if not msg.mentioned and msg.parent_channel_id is not None and self.transport.started(msg.channel_id):
            # A thread the bot started for its reply is a conversation with the bot.
            return replace(msg, mentioned=True)
        return msg

    async def _advance_cursor(self, channel_id: str, message_id: str) -> None:
        value = snowflake_key(message_id)
        if value <= self._cursors.get(channel_id, 0):
            return
        self._cursors[channel_id] = value
        self._cursors.move_to_end(channel_id)
        while len(self._cursors) > _MAX_CURSORS:
            self._cursors.popitem(last=False)
        await self._host.set_channel_cursor("discord", self.account_id, channel_id, message_id)

    async def _catch_up(self) -> None:
        cursors = await self._host.channel_cursors("discord", self.account_id)
        for channel_id, last in cursors.items():
            channel = await self._channels.lookup(channel_id)
            if channel is None:
                log.warning("catch-up skipped: channel unknown", channel=channel_id)
                continue
            await self._catch_up_channel(channel, last)

    async def _catch_up_channel(self, channel: ChannelInfo, after: str) -> None:
        fetched = 0
        limit = self._config.catch_up_limit
        while fetched < limit:
            want = min(100, limit - fetched)
            try:
                page = await self.rest.messages_after(channel.id, after, want)
            except PlatformError as exc:
                log.warning("catch-up failed", channel=channel.id, error=str(exc))
                return
            for item in page:
                data = {**item, "guild_id": item.get("guild_id") or channel.guild_id}
                await self._on_message(data, channel)
            fetched += len(page)
            if len(page) < want:
                return
            after = str(page[-1]["id"])

    # -- interactions ------------------------------------------------------------------------

    def interactions_app(self) -> ASGIApp:
        """The signed Interactions endpoint (mode `interactions`), to mount on the daemon."""
        if self._public_key is None:
            raise BindingConfigError('the Interactions endpoint needs mode = "interactions"')
        # A signed request replayed later than the five minutes would otherwise be accepted once
        # its dedupe row expired (DEDUPE_TTL_S) and run its command again.
        return InteractionsEndpoint(self._public_key, self._on_interaction, max_age_s=INTERACTION_MAX_AGE_S)

    async def _on_interaction(self, interaction: dict[str, Any]) -> dict[str, Any]:
        self._status.frame_received()
        clicked = await self._button_response(interaction)
        if clicked is not None:
            return clicked
        if int(interaction.get("type", 0)) != APPLICATION_COMMAND:
            return _ephemeral("This interaction is not supported.")
        msg = _interaction_message(interaction, self.account_id)
        if msg is None:
            return _ephemeral("This command cannot be used here.")
        outcome = await self.pipeline.handle(msg)
        return _ephemeral(_INTERACTION_REPLIES[outcome])

    async def _on_gateway_interaction(self, interaction: dict[str, Any]) -> None:
        """A button click over the Gateway, answered through the interaction callback. Other
        interactions are left alone (slash commands come over the Interactions endpoint)."""
        answer = await self._button_response(interaction)
        if answer is None:
            return
        try:
            await self.rest.interaction_callback(str(interaction["id"]), str(interaction["token"]), answer)
        except (PlatformError, KeyError) as exc:
            log.warning("could not answer a button click", binding=self.binding_id, error=str(exc))

    async def _button_response(self, interaction: dict[str, Any]) -> dict[str, Any] | None:
        """The response to an approval button click; None when it is not one."""
        click = approval_buttons.click_of(interaction)
        if click is None:
            return None
        reply = await self._click(*click)
        return None if reply is None else approval_buttons.response(reply)

    # -- approvals ---------------------------------------------------------------------------

    async def post_approval(self, route: ReplyRoute, approval: dict[str, Any]) -> ApprovalMessage:
        target = await self.transport.target_channel(route)
        nonce = outbox_key("discord", self.account_id, f"approval:{approval['id']}", 0)
        return await approval_buttons.post(self.rest, target, approval, nonce=nonce)

    async def show_approval(self, message: ApprovalMessage, approval: dict[str, Any]) -> None:
        await approval_buttons.show(self.rest, message, approval)

    # -- channel tools -----------------------------------------------------------------------

    async def _react(self, origin: SessionOrigin, params: dict[str, Any], tool_call_id: str) -> str:
        message_id = str(params.get("message_id") or origin.last_message_id)
        emoji = str(params["emoji"])
        await self.rest.add_reaction(origin.route.channel_id, message_id, emoji)
        return f"Reacted with {emoji} to message {message_id}."

    async def _send_file(self, origin: SessionOrigin, params: dict[str, Any], tool_call_id: str) -> str:
        data = file_bytes(params)
        target = await self.transport.target_channel(origin.route)
        nonce = outbox_key("discord", self.account_id, f"file:{tool_call_id}", 0)
        sent = await self.rest.send_file(
            target, str(params["filename"]), data, nonce=nonce, content=params.get("comment") or None
        )
        return f"Sent {params['filename']} ({len(data)} bytes) as message {sent.get('id')}."


def _ephemeral(text: str) -> dict[str, Any]:
    return {"type": CHANNEL_MESSAGE_WITH_SOURCE, "data": {"content": text, "flags": EPHEMERAL}}


def _thread_name(text: str, sender: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return (first or f"Reply to {sender}")[:100]


def _option_text(options: list[dict[str, Any]]) -> list[str]:
    parts: list[str] = []
    for option in options:
        if "value" in option:
            parts.append(str(option["value"]))
        parts.extend(_option_text(option.get("options") or []))
    return parts


def _interaction_message(interaction: dict[str, Any], account_id: str) -> ChatMessage | None:
    data = interaction.get("data") or {}
    channel_id = str(interaction.get("channel_id") or (interaction.get("channel") or {}).get("id") or "")
    if not channel_id:
        return None
    member = interaction.get("member") or {}
    user = member.get("user") or interaction.get("user") or {}
    sender = sender_of({"author": user, "member": member})
    guild_id = str(interaction["guild_id"]) if interaction.get("guild_id") else None
    chat_type: ChatType = "channel" if guild_id else "direct"
    text = " ".join(_option_text(data.get("options") or [])) or f"/{data.get('name', '')}"
    return ChatMessage(
        message_id=str(interaction["id"]),
        channel_id=channel_id,
        chat_type=chat_type,
        peer_id=sender.id if chat_type == "direct" else channel_id,
        text=text,
        sender=sender,
        reply_route=ReplyRoute(platform="discord", account_id=account_id, channel_id=channel_id),
        mentioned=True,
        guild_id=guild_id,
        member_roles=tuple(str(r) for r in member.get("roles") or ()),
    )
