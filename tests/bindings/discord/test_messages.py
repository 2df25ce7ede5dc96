"""Parsing MESSAGE_CREATE payloads and learning channels from dispatches."""

from __future__ import annotations

from typing import Any

from bindings.discord.messages import ChannelDirectory, ChannelInfo, parse_message

BOT = "1000"


def payload(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "11",
        "channel_id": "500",
        "guild_id": "900",
        "author": {"id": "42", "username": "alice", "global_name": "Alice"},
        "member": {"nick": "ally", "roles": ["r1", "r2"]},
        "content": "hello",
        "type": 0,
        "mentions": [],
    }
    data.update(overrides)
    return data


def parse(data: dict[str, Any], channel: ChannelInfo | None = None, *, threads: bool = False) -> Any:
    return parse_message(
        data,
        account_id="default",
        bot_user_id=BOT,
        channel=channel or ChannelInfo(id=data["channel_id"], type=0, guild_id=data.get("guild_id")),
        allow_bots=False,
        reply_in_thread=lambda channel_id, parent: threads,
    )


def test_guild_message() -> None:
    msg = parse(payload())
    assert (msg.chat_type, msg.peer_id, msg.text, msg.mentioned) == ("channel", "500", "hello", False)
    assert (msg.sender.id, msg.sender.name) == ("42", "ally")
    assert msg.member_roles == ("r1", "r2")
    assert (msg.reply_route.channel_id, msg.reply_route.reply_to, msg.reply_route.thread_id) == (
        "500",
        "11",
        None,
    )


def test_direct_message() -> None:
    data = payload(guild_id=None, member=None)
    msg = parse(data, ChannelInfo(id="500", type=1))
    assert (msg.chat_type, msg.peer_id, msg.sender.name) == ("direct", "42", "Alice")


def test_mentions_and_replies_to_the_bot() -> None:
    mentioned = parse(payload(content=f"<@!{BOT}> do it", mentions=[{"id": BOT}]))
    assert mentioned.mentioned and mentioned.text == "do it"
    reply = parse(payload(type=19, referenced_message={"author": {"id": BOT}}))
    assert reply.mentioned and reply.text == "hello"


def test_threads_have_a_parent_and_a_thread_id() -> None:
    msg = parse(payload(channel_id="777"), ChannelInfo(id="777", type=11, parent_id="500", guild_id="900"))
    assert (msg.parent_channel_id, msg.thread_id, msg.reply_route.channel_id) == ("500", "777", "777")
    started = parse(payload(), threads=True)
    assert (started.thread_id, started.reply_route.thread_id, started.reply_route.reply_to) == (
        "11",
        "11",
        None,
    )


def test_not_conversation() -> None:
    assert parse(payload(author={"id": BOT})) is None
    assert parse(payload(author={"id": "5", "bot": True})) is None
    assert parse(payload(webhook_id="w1")) is None
    assert parse(payload(type=7)) is None  # a member joined


async def test_directory_learns_from_dispatches_and_fetches_misses() -> None:
    fetched: list[str] = []

    async def fetch(channel_id: str) -> dict[str, Any]:
        fetched.append(channel_id)
        return {"id": channel_id, "type": 0, "guild_id": "900"}

    directory = ChannelDirectory(fetch, capacity=3)
    directory.learn(
        "GUILD_CREATE",
        {
            "id": "900",
            "channels": [{"id": "500", "type": 0}],
            "threads": [{"id": "777", "type": 11, "parent_id": "500"}],
        },
    )
    thread = await directory.lookup("777")
    assert thread is not None and thread.is_thread and thread.guild_id == "900" and thread.parent_id == "500"
    assert fetched == []
    directory.learn("THREAD_DELETE", {"id": "777"})
    assert await directory.lookup("777") is not None
    assert fetched == ["777"]
    for i in range(5):
        directory.put(ChannelInfo(id=str(i), type=0))
    assert await directory.lookup("500") is not None and fetched == ["777", "500"], (
        "evicted entries are fetched again"
    )
