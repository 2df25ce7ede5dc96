"""End to end: the real `gatewayd` (faux/echo model) relaying chat through its bindings.

The Discord and Slack stand-ins (`tests/bindings/standins`) run in the test process on loopback;
the daemon reaches them through each binding's `api_base_url` and reads the secrets from the
environment, exactly as it would reach the real platforms.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bindings.access import PAIRING_APPROVED_TEXT
from gateway.client import CallError, GatewayClient
from tests.bindings.helpers import wait_until
from tests.bindings.standins.discord import DiscordStandIn
from tests.bindings.standins.discord_interactions import InteractionsClient
from tests.bindings.standins.slack import SlackStandIn
from tests.bindings.standins.slack_events import SlackEventsClient
from tests.daemon import Daemon, start_daemon

GUILD = "900"
CHANNEL = "500"
DM = "600"
SLACK_CHANNEL = "C1"
SIGNING_SECRET = "slack-signing-secret"
NOTICE = "_(stopped)_"

SECRETS = {
    "DISCORD_BOT_TOKEN": "discord-test-token",
    "SLACK_BOT_TOKEN": "xoxb-test",
    "SLACK_APP_TOKEN": "xapp-test",
    "SLACK_SIGNING_SECRET": SIGNING_SECRET,
}


def bindings_toml(discord: DiscordStandIn | None, slack: SlackStandIn | None, extra: str = "") -> str:
    parts = []
    if discord is not None:
        parts.append(
            f"""
[bindings.discord.default]
api_base_url = "{discord.api_base_url}"
group_policy = "open"
require_mention = false
edit_interval_s = 0.2
"""
        )
    if slack is not None:
        parts.append(
            f"""
[bindings.slack.default]
api_base_url = "{slack.api_base_url}"
group_policy = "open"
require_mention = false
reply_in_thread = true
edit_interval_s = 0.2
"""
        )
    return "".join(parts) + extra


@asynccontextmanager
async def platforms() -> AsyncIterator[tuple[DiscordStandIn, SlackStandIn]]:
    async with DiscordStandIn(heartbeat_interval_ms=1000) as discord, SlackStandIn() as slack:
        discord.add_channel(CHANNEL, guild_id=GUILD)
        discord.add_channel(DM, type=1)
        yield discord, slack


@asynccontextmanager
async def gatewayd(home: Path, config: str, *, pace_ms: int = 5, tag: str = "") -> AsyncIterator[Daemon]:
    """The daemon, started and stopped off the event loop (the stand-ins live on it)."""
    env = {**SECRETS, "GATEWAY_FAUX_PACE_MS": str(pace_ms)}
    daemon = await asyncio.to_thread(start_daemon, home, config=config, env=env, tag=tag)
    try:
        yield daemon
    finally:
        await asyncio.to_thread(daemon.stop)


@asynccontextmanager
async def client_of(daemon: Daemon) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        yield client


async def channels_ready(client: GatewayClient, *ids: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """`channels.status` once every binding in `ids` reports `ready`."""
    deadline = time.monotonic() + timeout
    while True:
        rows: list[dict[str, Any]] = (await client.call("channels.status"))["channels"]
        states = {row["id"]: row["state"] for row in rows}
        if all(states.get(i) == "ready" for i in ids):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"bindings not ready: {states}")
        await asyncio.sleep(0.05)


async def slow_daemon(home: Path, config: str) -> Daemon:
    """The daemon with replies slow enough (25 ms a word) to act in the middle of one; the
    caller stops or kills it."""
    return await asyncio.to_thread(
        start_daemon, home, config=config, env={**SECRETS, "GATEWAY_FAUX_PACE_MS": "25"}
    )


async def stop_reasons(client: GatewayClient, session_key: str) -> list[str | None]:
    """How each assistant message of the session ended, in order."""
    history = await client.call("chat.history", {"sessionKey": session_key})
    return [m.get("stopReason") for m in history["messages"] if m["role"] == "assistant"]


def words(text: str) -> list[str]:
    return re.findall(r"w\d+", text)


def bot_messages(discord: DiscordStandIn, channel_id: str) -> list[dict[str, Any]]:
    return [m for m in discord.channels[channel_id].messages if m["author"]["id"] == discord.bot_user_id]


async def settle(predicate: Callable[[], object], timeout: float = 15.0) -> None:
    await wait_until(predicate, timeout)


async def test_discord_reply_streams_into_edited_messages_split_at_2000(gateway_home: Path) -> None:
    async with platforms() as (discord, _), AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, bindings_toml(discord, None)))
        client = await stack.enter_async_context(client_of(daemon))
        await channels_ready(client, "discord:default")

        await discord.dispatch_message(CHANNEL, "!long 600")
        await settle(lambda: "w600" in "".join(m["content"] for m in bot_messages(discord, CHANNEL)))
        await asyncio.sleep(0.5)  # the final pass (a last edit) may still be on its way

        replies = bot_messages(discord, CHANNEL)
        texts = [m["content"] for m in replies]
        assert len(replies) == 2, texts
        assert len(discord.posts) == 2  # one post per chunk, nothing posted twice
        assert all(len(t) <= 2000 for t in texts)
        assert words(" ".join(texts)) == [f"w{i}" for i in range(1, 601)]
        first = replies[0]["id"]
        first_post = next(p for p in discord.posts if p["id"] == first)
        edits = [e for e in discord.edits if e.message_id == first]
        assert len(words(first_post["content"])) < len(words(texts[0]))  # posted early...
        assert edits and edits[-1].content == texts[0]  # ...then edited while streaming

        # A reply with a code block that fits in a message: the split never falls inside it.
        code = "\n".join(f"    line_{i:03d} = compute({i})  # padding text" for i in range(36))
        block = f"```python\n{code}\n```"
        await discord.dispatch_message(CHANNEL, f"before\n\n{block}\n\n" + "tail " * 200)
        await settle(lambda: len(bot_messages(discord, CHANNEL)) >= 4 and "tail" in texts_of(discord)[-1])
        await asyncio.sleep(0.5)
        chunks = texts_of(discord)[2:]
        assert len(chunks) >= 2 and all(len(c) <= 2000 for c in chunks)
        assert sum(block in c for c in chunks) == 1
        for chunk in chunks:
            assert chunk.count("```") % 2 == 0, chunk


def texts_of(discord: DiscordStandIn) -> list[str]:
    return [m["content"] for m in bot_messages(discord, CHANNEL)]


async def test_slack_socket_mode_posts_then_updates_in_the_thread_and_runs_a_retry_once(
    gateway_home: Path,
) -> None:
    async with platforms() as (_, slack), AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, bindings_toml(None, slack)))
        client = await stack.enter_async_context(client_of(daemon))
        await channels_ready(client, "slack:default")

        event = slack.message_event(SLACK_CHANNEL, "!long 60")
        await slack.send_event(event, event_id="Ev0001")
        await slack.send_event(event, event_id="Ev0001", retry_attempt=1)  # Slack's retry
        thread = event["ts"]
        await settle(lambda: any("w60" in t for t in slack.bot_texts(SLACK_CHANNEL, thread)))
        await asyncio.sleep(0.5)

        assert slack.bot_texts(SLACK_CHANNEL) == []  # nothing outside the thread
        texts = slack.bot_texts(SLACK_CHANNEL, thread)
        assert len(texts) == 1 and words(texts[0]) == [f"w{i}" for i in range(1, 61)]
        assert len(slack.posts) == 1
        posted = slack.posts[0]
        assert posted["thread_ts"] == thread and len(words(posted["text"])) < 60
        assert [u.ts for u in slack.updates] and {u.ts for u in slack.updates} == {posted["ts"]}
        assert not slack.unacked()
        history = await client.call(
            "chat.history", {"sessionKey": "agent:main:slack:channel:c1:thread:" + thread}
        )
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]


async def test_a_replayed_discord_message_runs_once(gateway_home: Path) -> None:
    async with platforms() as (discord, _), AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, bindings_toml(discord, None)))
        client = await stack.enter_async_context(client_of(daemon))
        await channels_ready(client, "discord:default")

        message = await discord.dispatch_message(CHANNEL, "only once")
        await discord.gateway.dispatch("MESSAGE_CREATE", message)  # replayed delivery
        await settle(lambda: texts_of(discord) == ["echo: only once"])
        await asyncio.sleep(0.5)

        assert texts_of(discord) == ["echo: only once"]
        history = await client.call("chat.history", {"sessionKey": f"agent:main:discord:channel:{CHANNEL}"})
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]


async def test_an_unknown_dm_sender_pairs_before_anything_runs(gateway_home: Path) -> None:
    async with platforms() as (discord, _), AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, bindings_toml(discord, None)))
        client = await stack.enter_async_context(client_of(daemon))
        await channels_ready(client, "discord:default")

        first = await discord.dispatch_message(DM, "hello?", author_id="77", author_name="mallory")
        await settle(lambda: bot_messages(discord, DM))
        offer = bot_messages(discord, DM)[0]["content"]
        code = re.search(r"pairing code is ([A-Z0-9]{8})", offer)
        assert code is not None, offer
        requests = (await client.call("pairing.list"))["requests"]
        assert [(r["code"], r["channel"], r["senderId"]) for r in requests] == [(code[1], "discord", "77")]

        await discord.dispatch_message(DM, "still me", author_id="77", author_name="mallory")
        await asyncio.sleep(0.5)
        assert len(bot_messages(discord, DM)) == 1  # the same request; nothing ran
        assert (await client.call("sessions.list"))["count"] == 0

        assert f"gatewayctl pairing approve discord {code[1]}" in offer
        with pytest.raises(CallError):
            await client.call("pairing.approve", {"code": "ZZZZZZZZ"})
        with pytest.raises(CallError, match="for slack"):
            await client.call("pairing.approve", {"code": code[1], "channel": "slack"})
        approved = await client.call("pairing.approve", {"code": code[1].lower(), "channel": "discord"})
        assert approved["approved"]["senderId"] == "77"
        assert (await client.call("pairing.list"))["requests"] == []
        # The sender hears about it where they asked, as a reply to their first message.
        await settle(lambda: len(bot_messages(discord, DM)) == 2)
        told = bot_messages(discord, DM)[1]
        assert told["content"] == PAIRING_APPROVED_TEXT
        assert told["message_reference"]["message_id"] == first["id"]

        await discord.dispatch_message(DM, "now?", author_id="77", author_name="mallory")
        await settle(lambda: [m["content"] for m in bot_messages(discord, DM)][2:] == ["echo: now?"])


async def test_status_and_channel_tools_follow_the_conversation(gateway_home: Path) -> None:
    async with platforms() as (discord, slack), AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, bindings_toml(discord, slack)))
        client = await stack.enter_async_context(client_of(daemon))
        rows = await channels_ready(client, "discord:default", "slack:default")
        by_id = {row["id"]: row for row in rows}
        assert by_id["discord:default"]["channel"] == "discord"
        assert by_id["slack:default"]["mode"] == "socket"
        for _ in range(100):  # READY and heartbeat ACKs are inbound frames
            rows = (await client.call("channels.status"))["channels"]
            discord_row = next(row for row in rows if row["id"] == "discord:default")
            if discord_row["lastInboundAt"] is not None:
                break
            await asyncio.sleep(0.05)
        assert discord_row["connected"] is True
        assert abs(discord_row["lastInboundAt"] / 1000 - time.time()) < 5
        assert 0 <= discord_row["secondsSinceLastInbound"] < 5

        message = await discord.dispatch_message(CHANNEL, '!tool discord_add_reaction {"emoji": "👍"}')
        await settle(lambda: texts_of(discord) and texts_of(discord)[-1].startswith("echo: Reacted"))
        assert discord.reactions == [(CHANNEL, message["id"], "👍")]

        # The same call in a session that did not come from Discord: the tool does not exist.
        answer = await client.call(
            "agent",
            {
                "sessionKey": "agent:main:operator",
                "message": '!tool discord_add_reaction {"emoji": "🔥"}',
                "idempotencyKey": "op-1",
            },
        )
        assert answer["status"] == "accepted"
        waited = await client.call("agent.wait", {"runId": "op-1", "timeoutMs": 10_000})
        assert waited["status"] == "ok"
        history = await client.call("chat.history", {"sessionKey": "agent:main:operator"})
        results = [m for m in history["messages"] if m["role"] == "toolResult"]
        assert len(results) == 1 and results[0]["isError"] is True
        assert len(discord.reactions) == 1
        assert not slack.posts  # nothing of either session leaked into Slack


async def test_channel_tools_find_the_conversation_after_a_restart(gateway_home: Path) -> None:
    async with platforms() as (discord, _):
        config = bindings_toml(discord, None)
        async with gatewayd(gateway_home, config) as daemon, client_of(daemon) as client:
            await channels_ready(client, "discord:default")
            message = await discord.dispatch_message(CHANNEL, "remember me")
            await settle(lambda: texts_of(discord) == ["echo: remember me"])

        key = f"agent:main:discord:channel:{CHANNEL}"
        async with gatewayd(gateway_home, config, tag="-2") as again, client_of(again) as client:
            await channels_ready(client, "discord:default")
            # No message has come through since the restart; an operator's run in the session
            # still has the channel's tools, acting on the conversation's latest message.
            await client.call(
                "agent",
                {
                    "sessionKey": key,
                    "message": '!tool discord_add_reaction {"emoji": "👀"}',
                    "idempotencyKey": "op-2",
                },
            )
            waited = await client.call("agent.wait", {"runId": "op-2", "timeoutMs": 10_000})
            assert waited["status"] == "ok"
            history = await client.call("chat.history", {"sessionKey": key})
            [result] = [m for m in history["messages"] if m["role"] == "toolResult"]
            assert result["isError"] is False, result
            assert discord.reactions == [(CHANNEL, message["id"], "👀")]


async def test_a_crash_mid_reply_ends_with_one_finished_reply_and_no_lost_message(gateway_home: Path) -> None:
    async with platforms() as (discord, _):
        other = "501"
        discord.add_channel(other, guild_id=GUILD)
        config = bindings_toml(discord, None)
        daemon = await slow_daemon(gateway_home, config)
        try:
            async with client_of(daemon) as client:
                await channels_ready(client, "discord:default")
            await discord.dispatch_message(other, "hello 501")  # the daemon now knows channel 501
            await settle(lambda: [m["content"] for m in bot_messages(discord, other)] == ["echo: hello 501"])
            await discord.dispatch_message(CHANNEL, "!long 300")
            await settle(lambda: bot_messages(discord, CHANNEL) and discord.edits)
            # Accepted while the reply streams (steered into the run), not started when it dies.
            await discord.dispatch_message(CHANNEL, "second question")
            await asyncio.sleep(0.3)
            shown = len(words(bot_messages(discord, CHANNEL)[0]["content"]))
        finally:
            daemon.kill()
        assert 0 < shown < 300

        # While the daemon is down a user writes (no gateway session will deliver it).
        discord.user_message(other, "did you see this?")

        async with gatewayd(gateway_home, config, tag="-2") as again, client_of(again) as client:
            await channels_ready(client, "discord:default")
            caught_up = ["echo: hello 501", "echo: did you see this?"]
            await settle(lambda: [m["content"] for m in bot_messages(discord, other)] == caught_up)
            await settle(lambda: texts_of(discord)[1:] == ["echo: second question"])
            await settle(lambda: texts_of(discord)[0].endswith(NOTICE))
            await asyncio.sleep(0.5)

            replies = texts_of(discord)
            assert len(replies) == 2 and len(discord.posts) == 4
            assert discord.create_attempts == 4  # not even a post deduplicated by its nonce
            cut = words(replies[0])
            assert len(cut) >= shown and cut == [f"w{i}" for i in range(1, len(cut) + 1)]
            key = f"agent:main:discord:channel:{CHANNEL}"
            assert await stop_reasons(client, key) == ["aborted", "stop"]


async def test_a_crash_mid_slack_reply_finishes_it_by_editing_and_posts_nothing_twice(
    gateway_home: Path,
) -> None:
    async with SlackStandIn() as slack:
        config = bindings_toml(None, slack, extra="chunk_limit = 400\n")
        daemon = await slow_daemon(gateway_home, config)
        try:
            async with client_of(daemon) as client:
                await channels_ready(client, "slack:default")
            slack.hold_posts_after(1)  # the reply's second message lands, but its answer never comes
            event = slack.message_event(SLACK_CHANNEL, "!long 300")
            await slack.send_event(event)
            thread = event["ts"]
            await settle(lambda: len(slack.posts) == 2 and slack.updates)
            # Recorded (acked) while the reply streams, not started when the daemon dies.
            second = await slack.send_event(
                slack.message_event(SLACK_CHANNEL, "second question", thread_ts=thread)
            )
            await settle(lambda: second["event_id"] in slack.acked_event_ids())
            await asyncio.sleep(0.3)
        finally:
            daemon.kill()
        shown = len(words(" ".join(slack.bot_texts(SLACK_CHANNEL, thread))))
        assert 0 < shown < 300
        slack.release_posts()

        async with gatewayd(gateway_home, config, tag="-2") as again, client_of(again) as client:
            await channels_ready(client, "slack:default")
            await settle(lambda: slack.bot_texts(SLACK_CHANNEL, thread)[-1:] == ["echo: second question"])
            await settle(lambda: slack.bot_texts(SLACK_CHANNEL, thread)[-2].endswith(NOTICE))
            await asyncio.sleep(0.5)

            *reply, answer = slack.bot_texts(SLACK_CHANNEL, thread)
            assert answer == "echo: second question" and len(reply) >= 2
            assert all(len(chunk) <= 400 for chunk in reply)
            cut = words(" ".join(reply))
            assert len(cut) >= shown and cut == [f"w{i}" for i in range(1, len(cut) + 1)]
            keys = [post["metadata"]["event_payload"]["key"] for post in slack.posts]
            assert len(keys) == len(set(keys)) == len(reply) + 1  # one message per chunk, none twice
            assert slack.post_attempts == len(slack.posts)  # the held one was found, not posted again
            assert slack.bot_texts(SLACK_CHANNEL) == [] and not slack.unacked()
            key = f"agent:main:slack:channel:c1:thread:{thread}"
            assert await stop_reasons(client, key) == ["aborted", "stop"]


async def test_a_slack_message_during_shutdown_is_left_unacked_and_runs_after_the_restart(
    gateway_home: Path,
) -> None:
    async with SlackStandIn() as slack:
        config = "[gateway]\nshutdown_grace_s = 20\n" + bindings_toml(None, slack)
        daemon = await slow_daemon(gateway_home, config)
        try:
            async with client_of(daemon) as client:
                await channels_ready(client, "slack:default")
            first = slack.message_event(SLACK_CHANNEL, "!long 200")
            await slack.send_event(first)
            await settle(lambda: slack.bot_texts(SLACK_CHANNEL, first["ts"]))
            daemon.proc.send_signal(signal.SIGTERM)  # drains: the running reply gets its grace period
            await settle(lambda: "stopping" in daemon.logs())
            late = slack.message_event(SLACK_CHANNEL, "written during the drain")
            payload = await slack.send_event(late)
            await asyncio.sleep(1.0)
            assert daemon.proc.poll() is None, "still draining"
            assert payload["event_id"] not in slack.acked_event_ids()  # nothing recorded, no ack
            assert await asyncio.to_thread(daemon.proc.wait, 30) == 0
        finally:
            daemon.kill()
        done = slack.bot_texts(SLACK_CHANNEL, first["ts"])
        assert words(" ".join(done)) == [f"w{i}" for i in range(1, 201)] and NOTICE not in done[-1]

        async with gatewayd(gateway_home, config, tag="-2"):
            # Slack delivers the unacknowledged event again on the new connection.
            await settle(
                lambda: slack.bot_texts(SLACK_CHANNEL, late["ts"]) == ["echo: written during the drain"]
            )
            await asyncio.sleep(0.3)
        assert slack.acked_event_ids().count(payload["event_id"]) == 1 and not slack.unacked()
        assert [e["retry_attempt"] for e in slack.envelopes.values()] == [0, 0, 1]


async def test_config_reload_applies_access_and_routing_to_running_bindings(gateway_home: Path) -> None:
    async with platforms() as (discord, _):
        account = f"""
[bindings.discord.default]
api_base_url = "{discord.api_base_url}"
group_policy = "allowlist"
require_mention = false
edit_interval_s = 0.2
"""
        async with gatewayd(gateway_home, account) as daemon, client_of(daemon) as client:
            await channels_ready(client, "discord:default")
            await discord.dispatch_message(CHANNEL, "anyone there?")
            await asyncio.sleep(0.5)
            assert texts_of(discord) == []  # the channel is not on the allowlist

            config_path = gateway_home / "gateway.toml"
            config_path.write_text(account + 'dm_policy = "sometimes"\n')
            with pytest.raises(CallError, match="dm_policy"):
                await client.call("config.reload")

            allowed = account + f'intents = 513\nchannels."{CHANNEL}" = {{ queue_mode = "followup" }}\n'
            config_path.write_text(allowed)
            answer = await client.call("config.reload")
            assert answer["changed"] == [
                "bindings.discord.default.channels",
                "bindings.discord.default.intents",
            ]
            assert answer["restartRequired"] == ["bindings.discord.default.intents"]
            await discord.dispatch_message(CHANNEL, "and now?")
            await settle(lambda: texts_of(discord) == ["echo: and now?"])

            config_path.write_text(
                allowed + '\n[bindings.slack.extra]\napi_base_url = "http://127.0.0.1:9/"\n'
            )
            answer = await client.call("config.reload")
            assert answer["restartRequired"] == ["bindings.slack.extra", "bindings.discord.default.intents"]
            rows = await client.call("channels.status")
            assert [row["id"] for row in rows["channels"]] == ["discord:default"]


async def test_webhooks_are_served_under_bindings(gateway_home: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/bindings"
    async with platforms() as (discord, slack), httpx.AsyncClient() as http:
        interactions = InteractionsClient(http, f"{base}/discord/slash/interactions")
        config = f"""
[bindings.slack.hooks]
mode = "events"
api_base_url = "{slack.api_base_url}"
group_policy = "open"
require_mention = false

[bindings.discord.slash]
mode = "interactions"
api_base_url = "{discord.api_base_url}"
public_key_env = "DISCORD_TEST_PUBLIC_KEY"
"""
        env = {**SECRETS, "DISCORD_TEST_PUBLIC_KEY": interactions.public_key_hex}
        daemon = await asyncio.to_thread(start_daemon, gateway_home, config=config, env=env, port=port)
        try:
            async with client_of(daemon) as client:
                await channels_ready(client, "slack:hooks", "discord:slash")
            events = SlackEventsClient(http, f"{base}/slack/hooks/events", SIGNING_SECRET)
            verified = await events.url_verification("c-123")
            assert verified.status_code == 200 and verified.json() == {"challenge": "c-123"}
            forged = await events.send({"type": "url_verification", "challenge": "x"}, forge=True)
            assert forged.status_code == 401
            answer = await events.send(slack.callback(slack.message_event("C9", "via events")))
            assert answer.status_code == 200
            await settle(lambda: slack.bot_texts("C9") == ["echo: via events"])

            pong = await interactions.ping()
            assert pong.status_code == 200 and pong.json() == {"type": 1}
            assert (await interactions.ping(other_key=True)).status_code == 401
            assert (await http.post(f"{base}/slack/nobody/events")).status_code == 404
        finally:
            await asyncio.to_thread(daemon.stop)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_invalid_bindings_config_names_the_key_and_the_file(gateway_home: Path) -> None:
    bad = '[bindings.discord.default]\ndm_policy = "sometimes"\n'
    with pytest.raises(RuntimeError) as failed:
        await asyncio.to_thread(start_daemon, gateway_home, config=bad, env=SECRETS)
    message = str(failed.value)
    assert "exit 2" in message
    assert f"config error in {gateway_home / 'gateway.toml'}: bindings.discord.default.dm_policy" in message
