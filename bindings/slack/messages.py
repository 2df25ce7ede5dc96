"""Turning Slack events into platform-neutral `ChatMessage`s.

Only conversation counts: plain messages, `thread_broadcast`, `file_share` and `app_mention`;
edits, deletions, joins and bot posts (unless allowed) are not. A mention in a channel arrives
twice (`message` and `app_mention`, with different event ids); both map to the same message id
(`ts`), which the pipeline deduplicates.

Threads: a message inside a thread keeps that thread's `thread_ts` for its session key and its
replies. With `reply_in_thread`, a top-level channel message starts a thread: its replies go
under it and the session is keyed by its `ts`, so follow-ups in that thread continue the same
session. DMs never thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bindings.host import ChatType, ReplyRoute, Sender
from bindings.inbound import ChatMessage

CONVERSATION_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})


def chat_type_of(event: dict[str, Any]) -> ChatType:
    kind = event.get("channel_type")
    channel = str(event.get("channel", ""))
    if kind == "im" or (kind is None and channel.startswith("D")):
        return "direct"
    if kind == "mpim":
        return "group"
    return "channel"


def parse_event(
    event: dict[str, Any],
    *,
    account_id: str,
    bot_user_id: str,
    bot_id: str | None,
    team_id: str | None,
    allow_bots: bool,
    reply_in_thread: Callable[[str, str | None], bool],
) -> ChatMessage | None:
    """The `ChatMessage` of a `message` or `app_mention` event, or None when it is not
    conversation for the agent."""
    kind = event.get("type")
    if kind not in ("message", "app_mention") or event.get("subtype") not in CONVERSATION_SUBTYPES:
        return None
    user = str(event.get("user") or "")
    is_bot = bool(event.get("bot_id"))
    if not user or user == bot_user_id or (bot_id is not None and event.get("bot_id") == bot_id):
        return None
    if is_bot and not allow_bots:
        return None
    channel = str(event["channel"])
    ts = str(event["ts"])
    chat_type = chat_type_of(event)
    text = str(event.get("text") or "")
    mention = re.compile(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>")
    mentioned = (
        kind == "app_mention"
        or bool(mention.search(text))
        or str(event.get("parent_user_id") or "") == bot_user_id
    )
    thread_ts = str(event["thread_ts"]) if event.get("thread_ts") and event.get("thread_ts") != ts else None
    session_thread = thread_ts
    if chat_type == "direct":
        session_thread = None
    elif thread_ts is None and reply_in_thread(channel, None):
        session_thread = ts
    reply_thread = thread_ts if thread_ts is not None else session_thread
    profile = event.get("user_profile") or {}
    name = profile.get("display_name") or profile.get("real_name") or user
    return ChatMessage(
        message_id=ts,
        channel_id=channel,
        chat_type=chat_type,
        peer_id=user if chat_type == "direct" else channel,
        text=mention.sub("", text).strip(),
        sender=Sender(id=user, name=str(name), is_bot=is_bot),
        reply_route=ReplyRoute(
            platform="slack", account_id=account_id, channel_id=channel, thread_id=reply_thread
        ),
        mentioned=mentioned,
        thread_id=session_thread,
        team_id=team_id or event.get("team"),
    )
