"""DiscordBinding end to end against the Discord stand-in, with the in-memory host."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx

from bindings.chunking import chunk_text
from bindings.config import DiscordAccountConfig
from bindings.discord import DiscordBinding, GatewayTimings
from bindings.state import ConnectionState
from tests.bindings.helpers import account_settings, ready, stream_reply, wait_until
from tests.bindings.memory_host import MemoryHost
from tests.bindings.standins.discord import DiscordStandIn

FAST = GatewayTimings(
    invalid_session_delay=(0.05, 0.1),
    reconnect_initial_s=0.05,
    reconnect_max_s=0.2,
    hello_timeout_s=2.0,
    close_timeout_s=1.0,
)
GUILD = "900"
CHANNEL = "500"


def make_binding(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient, **settings: Any
) -> DiscordBinding:
    config = DiscordAccountConfig(**account_settings(discord.api_base_url, **settings))
    return DiscordBinding(config, host, http, env={"DISCORD_BOT_TOKEN": discord.token}, timings=FAST)


async def test_message_gets_one_streamed_edited_split_reply(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        message = await discord.dispatch_message(CHANNEL, "write me an essay")
        await wait_until(lambda: host.submitted)
        inbound = host.submitted[0]
        assert inbound.session_key == "agent:main:discord:channel:500"
        assert inbound.text == "write me an essay"
        assert inbound.message_id == message["id"]
        parts = [f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 5 + "\n\n" for i in range(30)]
        text = await stream_reply(binding, host, inbound, parts)

        expected = chunk_text(text, 2000)
        assert len(expected) >= 2
        assert discord.channel_texts(CHANNEL) == expected
        assert len(discord.posts) == len(expected)  # one message per chunk, never re-sent
        assert discord.posts[0]["message_reference"]["message_id"] == message["id"]
        first_id = discord.posts[0]["id"]
        edits = [e for e in discord.edits if e.message_id == first_id]
        assert edits, "the head message was edited while streaming"
        gaps = [b.at - a.at for a, b in itertools.pairwise(edits[:-1])]
        assert all(gap >= 0.15 for gap in gaps), gaps
        assert discord.violations == 0
    assert host.state_history("discord:default")[-3:] == ["connecting", "ready", "closed"]


async def test_zombie_connection_is_closed_and_resumed_without_losing_a_message(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        await discord.dispatch_message(CHANNEL, "one")
        await wait_until(lambda: len(host.submitted) == 1)
        first = discord.gateway.connections[-1]
        assert discord.gateway.current is not None
        delivered_seq = discord.gateway.current.seq
        discord.gateway.zombify()
        await discord.dispatch_message(CHANNEL, "two")  # lost on the dead link, kept in the session log
        await wait_until(lambda: discord.gateway.resumes, timeout=5)
        await wait_until(lambda: len(host.submitted) == 2)
        await ready(binding)
    assert [m.text for m in host.submitted] == ["one", "two"]
    assert first.close_code not in (None, 1000, 1001)
    assert discord.gateway.resumes[0]["session_id"] == discord.gateway.current.id
    assert discord.gateway.resumes[0]["seq"] == delivered_seq
    assert len(discord.gateway.identifies) == 1
    assert "resuming" in host.state_history("discord:default")
    assert discord.gateway.connections[-1].path.startswith("/resume?")


async def test_reconnect_request_resumes_the_session(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        await discord.gateway.send_reconnect()
        await discord.dispatch_message(CHANNEL, "sent during the reconnect")
        await wait_until(lambda: discord.gateway.resumes)
        await wait_until(lambda: len(host.submitted) == 1)
        await discord.dispatch_message(CHANNEL, "after")
        await wait_until(lambda: len(host.submitted) == 2)
    assert [m.text for m in host.submitted] == ["sent during the reconnect", "after"]
    assert len(discord.gateway.identifies) == 1


async def test_invalid_session_not_resumable_identifies_again(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        old_session = discord.gateway.current
        await discord.gateway.invalidate_session(resumable=False)
        await wait_until(lambda: len(discord.gateway.identifies) == 2)
        await ready(binding)
        assert discord.gateway.current is not old_session
        assert not discord.gateway.resumes
        await discord.dispatch_message(CHANNEL, "hello again")
        await wait_until(lambda: len(host.submitted) == 1)


async def test_invalid_session_resumable_resumes(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        await discord.gateway.invalidate_session(resumable=True)
        await wait_until(lambda: discord.gateway.resumes)
        await ready(binding)
    assert len(discord.gateway.identifies) == 1


async def test_messages_missed_while_down_are_caught_up_once(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        await discord.dispatch_message(CHANNEL, "seen live")
        await wait_until(lambda: len(host.submitted) == 1)
    missed = [discord.user_message(CHANNEL, f"missed {i}") for i in range(3)]
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        await wait_until(lambda: len(host.submitted) == 4)
        await asyncio.sleep(0.1)
    assert [m.text for m in host.submitted] == ["seen live", "missed 0", "missed 1", "missed 2"]
    assert host.cursors[("discord", "default")][CHANNEL] == missed[-1]["id"]


async def test_rate_limited_reply_pauses_and_resumes_without_dropping(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        await discord.dispatch_message(CHANNEL, "go")
        await wait_until(lambda: host.submitted)
        inbound = host.submitted[0]
        run_id = host.results[inbound.idempotency_key].run_id
        assert run_id is not None
        discord.force_429("create", times=2, retry_after=0.25)
        discord.force_429("edit", times=1, retry_after=0.25)
        text = "x " * 1500 + "\n\n" + "y " * 1500
        host.emit(inbound.session_key, run_id, "delta", text[:100])
        await asyncio.sleep(0.3)
        host.emit(inbound.session_key, run_id, "final", text)
        await wait_until(lambda: binding.relay.active_streams == 0, timeout=10)
    assert discord.channel_texts(CHANNEL) == chunk_text(text, 2000)
    assert discord.forced_sent == 3
    limited = [r for r in discord.requests if r[2] == 429]
    for method, path, _, at in limited:
        retried = [r for r in discord.requests if r[0] == method and r[1] == path and r[3] > at]
        assert retried and retried[0][3] - at >= 0.2, "the retry waited for retry_after"
    assert binding.rest.limiter.throttled == 3


async def test_pairing_flow(discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient) -> None:
    dm = "700"
    discord.add_channel(dm, type=1)
    async with make_binding(discord, host, http, dm_policy="pairing") as binding:
        await ready(binding)
        await discord.dispatch_message(dm, "hi, can I use you?", author_id="77")
        await wait_until(lambda: discord.channel_texts(dm))
        [reply] = discord.channel_texts(dm)
        [request] = await host.pairing_list()
        assert request.code in reply and request.sender_id == "77"
        await discord.dispatch_message(dm, "hello?", author_id="77")
        await asyncio.sleep(0.2)
        assert len(discord.channel_texts(dm)) == 1, "the code is sent once"
        assert host.submitted == []
        assert await host.pairing_approve(request.code) is not None
        await discord.dispatch_message(dm, "now?", author_id="77")
        await wait_until(lambda: host.submitted)
    assert host.submitted[0].text == "now?"
    assert host.submitted[0].chat_type == "direct"
    assert host.submitted[0].session_key == "agent:main:main"


async def test_mentions_are_required_and_stripped(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http, require_mention=True) as binding:
        await ready(binding)
        await discord.dispatch_message(CHANNEL, "not for the bot")
        await discord.dispatch_message(CHANNEL, "the bot wrote this", author_id=discord.bot_user_id)
        await discord.dispatch_message(CHANNEL, "another bot", author_id="55", bot=True)
        await discord.dispatch_message(CHANNEL, "for the bot", mention_bot=True)
        await wait_until(lambda: host.submitted)
        await asyncio.sleep(0.1)
    assert [m.text for m in host.submitted] == ["for the bot"]


async def test_group_allowlist_and_routes(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    discord.add_channel("501", guild_id=GUILD)
    routes = [{"agent_id": "support", "match": {"channel": "discord", "guild_id": GUILD, "roles": ["r1"]}}]
    settings = {
        "group_policy": "allowlist",
        "channels": {CHANNEL: {"queue_mode": "collect"}},
        "routes": routes,
    }
    async with make_binding(discord, host, http, **settings) as binding:
        await ready(binding)
        await discord.dispatch_message("501", "not allowed here")
        await discord.dispatch_message(CHANNEL, "plain member")
        await discord.dispatch_message(CHANNEL, "support member", roles=("r1",))
        await wait_until(lambda: len(host.submitted) == 2)
    plain, support = host.submitted
    assert (plain.agent_id, plain.session_key, plain.queue_mode) == (
        "main",
        "agent:main:discord:channel:500",
        "collect",
    )
    assert (support.agent_id, support.session_key) == ("support", "agent:support:discord:channel:500")


async def test_reply_in_thread_starts_a_thread_and_follow_ups_continue_the_session(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http, reply_in_thread=True, require_mention=True) as binding:
        await ready(binding)
        first = await discord.dispatch_message(CHANNEL, "Question about deploys", mention_bot=True)
        await wait_until(lambda: host.submitted)
        inbound = host.submitted[0]
        assert inbound.session_key == f"agent:main:discord:channel:{CHANNEL}:thread:{first['id']}"
        run_id = host.results[inbound.idempotency_key].run_id
        assert run_id is not None
        host.emit(inbound.session_key, run_id, "final", "Here is the answer.")
        await wait_until(lambda: discord.channel_texts(first["id"]))
        assert discord.threads_started == [(CHANNEL, first["id"], "Question about deploys")]
        assert discord.channel_texts(CHANNEL) == []
        await discord.dispatch_message(first["id"], "and a follow-up without a mention")
        await wait_until(lambda: len(host.submitted) == 2)
    follow_up = host.submitted[1]
    assert follow_up.session_key == inbound.session_key
    assert follow_up.parent_channel_id == CHANNEL


async def test_channel_tools_only_for_sessions_from_the_channel(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    discord.add_channel(CHANNEL, guild_id=GUILD)
    async with make_binding(discord, host, http) as binding:
        await ready(binding)
        message = await discord.dispatch_message(CHANNEL, "react to this")
        await wait_until(lambda: host.submitted)
        key = host.submitted[0].session_key
        assert binding.tools_for("agent:main:discord:channel:999") == []
        tools = {t.name: t for t in binding.tools_for(key)}
        assert set(tools) == {"discord_add_reaction", "discord_send_file"}
        result = await tools["discord_add_reaction"].execute("call-1", {"emoji": "👍"}, None, None)
        assert "👍" in result.content[0].text  # type: ignore[union-attr]
        await tools["discord_send_file"].execute(
            "call-2", {"filename": "notes.txt", "content": "hello file", "comment": "here"}, None, None
        )
        await tools["discord_send_file"].execute(
            "call-2", {"filename": "notes.txt", "content": "hello file", "comment": "here"}, None, None
        )
    assert discord.reactions == [(CHANNEL, message["id"], "👍")]
    assert [(c, name, data) for c, _, name, data in discord.files] == [(CHANNEL, "notes.txt", b"hello file")]


async def test_bad_token_never_reports_ready(
    discord: DiscordStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    config = DiscordAccountConfig(api_base_url=discord.api_base_url)
    binding = DiscordBinding(config, host, http, env={"DISCORD_BOT_TOKEN": "wrong"}, timings=FAST)
    async with binding:
        await asyncio.sleep(0.3)
        assert binding.state is ConnectionState.CLOSED
    assert "ready" not in host.state_history("discord:default")
