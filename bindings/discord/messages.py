"""Turning Discord's MESSAGE_CREATE payloads into platform-neutral `ChatMessage`s.

Channels are looked up in a bounded cache fed by GUILD_CREATE / CHANNEL_* / THREAD_* dispatches
and, on a miss, by `GET /channels/{id}`; the cache only serves to know whether a channel is a
thread and what its parent is.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bindings.errors import PlatformError
from bindings.host import ChatType, ReplyRoute, Sender
from bindings.inbound import ChatMessage

THREAD_TYPES = frozenset({10, 11, 12})
DM_TYPE = 1
GROUP_DM_TYPE = 3
USER_MESSAGE_TYPES = frozenset({0, 19})
"""DEFAULT and REPLY; joins, pins, boosts and the like are not conversation."""


@dataclass(frozen=True, kw_only=True)
class ChannelInfo:
    id: str
    type: int
    parent_id: str | None = None
    guild_id: str | None = None

    @property
    def is_thread(self) -> bool:
        return self.type in THREAD_TYPES


def channel_info(data: dict[str, Any]) -> ChannelInfo:
    return ChannelInfo(
        id=str(data["id"]),
        type=int(data.get("type", 0)),
        parent_id=str(data["parent_id"]) if data.get("parent_id") else None,
        guild_id=str(data["guild_id"]) if data.get("guild_id") else None,
    )


class ChannelDirectory:
    """Bounded LRU of channel facts; `fetch` (`GET /channels/{id}`) fills misses."""

    def __init__(self, fetch: Callable[[str], Awaitable[dict[str, Any]]], capacity: int = 10_000) -> None:
        self._fetch = fetch
        self._capacity = capacity
        self._cache: OrderedDict[str, ChannelInfo] = OrderedDict()

    def put(self, info: ChannelInfo) -> None:
        self._cache[info.id] = info
        self._cache.move_to_end(info.id)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    def forget(self, channel_id: str) -> None:
        self._cache.pop(channel_id, None)

    def learn(self, event: str, data: Any) -> None:
        """Feed a dispatch; channels in it are remembered."""
        if not isinstance(data, dict):
            return
        if event == "GUILD_CREATE":
            guild_id = str(data.get("id", ""))
            for item in [*data.get("channels", []), *data.get("threads", [])]:
                self.put(channel_info({**item, "guild_id": item.get("guild_id", guild_id)}))
        elif event in ("CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE", "THREAD_UPDATE") and "id" in data:
            self.put(channel_info(data))
        elif event in ("CHANNEL_DELETE", "THREAD_DELETE") and "id" in data:
            self.forget(str(data["id"]))

    async def lookup(self, channel_id: str) -> ChannelInfo | None:
        """The channel's facts, fetched on a miss; None when they cannot be fetched."""
        info = self._cache.get(channel_id)
        if info is not None:
            return info
        try:
            info = channel_info(await self._fetch(channel_id))
        except PlatformError:
            return None
        self.put(info)
        return info


def strip_mentions(text: str, user_id: str) -> str:
    return re.sub(rf"<@!?{re.escape(user_id)}>", "", text).strip()


def is_mentioned(data: dict[str, Any], user_id: str) -> bool:
    """The bot is mentioned, or the message replies to one of the bot's messages."""
    if any(str(m.get("id")) == user_id for m in data.get("mentions") or []):
        return True
    if re.search(rf"<@!?{re.escape(user_id)}>", str(data.get("content", ""))):
        return True
    referenced = data.get("referenced_message") or {}
    return str((referenced.get("author") or {}).get("id", "")) == user_id


def sender_of(data: dict[str, Any]) -> Sender:
    author = data.get("author") or {}
    member = data.get("member") or {}
    name = (
        member.get("nick") or author.get("global_name") or author.get("username") or str(author.get("id", ""))
    )
    return Sender(
        id=str(author.get("id", "")), name=str(name), is_bot=bool(author.get("bot") or data.get("webhook_id"))
    )


def _chat_type(guild_id: str | None, channel: ChannelInfo) -> ChatType:
    if guild_id is not None:
        return "channel"
    return "group" if channel.type == GROUP_DM_TYPE else "direct"


def parse_message(
    data: dict[str, Any],
    *,
    account_id: str,
    bot_user_id: str,
    channel: ChannelInfo,
    allow_bots: bool,
    reply_in_thread: Callable[[str, str | None], bool],
) -> ChatMessage | None:
    """The `ChatMessage` of a MESSAGE_CREATE payload, or None for messages that are not
    conversation (our own, other bots' unless allowed, system messages)."""
    sender = sender_of(data)
    if not sender.id or sender.id == bot_user_id or (sender.is_bot and not allow_bots):
        return None
    if int(data.get("type", 0)) not in USER_MESSAGE_TYPES:
        return None
    message_id = str(data["id"])
    channel_id = str(data["channel_id"])
    guild_id = str(data["guild_id"]) if data.get("guild_id") else None
    chat_type = _chat_type(guild_id, channel)
    parent_id = channel.parent_id if channel.is_thread else None
    thread_id = channel_id if channel.is_thread else None
    reply_thread: str | None = None
    reply_to: str | None = message_id
    if chat_type == "channel" and thread_id is None and reply_in_thread(channel_id, None):
        # A thread started on this message gets the message's id: the session is keyed by it.
        thread_id = reply_thread = message_id
        reply_to = None
    route = ReplyRoute(
        platform="discord",
        account_id=account_id,
        channel_id=channel_id,
        thread_id=reply_thread,
        reply_to=reply_to,
    )
    mentioned = is_mentioned(data, bot_user_id)
    text = (
        strip_mentions(str(data.get("content", "")), bot_user_id)
        if mentioned
        else str(data.get("content", ""))
    )
    member = data.get("member") or {}
    return ChatMessage(
        message_id=message_id,
        channel_id=channel_id,
        chat_type=chat_type,
        peer_id=sender.id if chat_type == "direct" else channel_id,
        text=text,
        sender=sender,
        reply_route=route,
        mentioned=mentioned,
        parent_channel_id=parent_id,
        thread_id=thread_id,
        guild_id=guild_id,
        member_roles=tuple(str(r) for r in member.get("roles") or ()),
    )
