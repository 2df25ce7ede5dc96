"""A Discord and a Slack account in a cluster: connected from exactly one node, taken over by
another when that node dies, with every reply finished once and nothing posted twice."""

from __future__ import annotations

import asyncio

import pytest

from tests.bindings.standins.slack import SlackStandIn
from tests.cluster.conftest import LEASE_TTL_S, Cluster, needs_cluster
from tests.daemon import Daemon
from tests.e2e.test_channels import (
    CHANNEL,
    NOTICE,
    SECRETS,
    SLACK_CHANNEL,
    bindings_toml,
    bot_messages,
    channels_ready,
    client_of,
    platforms,
    settle,
    stop_reasons,
    texts_of,
    words,
)

pytestmark = [needs_cluster, pytest.mark.postgres, pytest.mark.slow]

ENV = {**SECRETS, "GATEWAY_FAUX_PACE_MS": "25"}


async def start(cluster: Cluster, name: str) -> Daemon:
    return await asyncio.to_thread(cluster.start, name, env=ENV)


async def holder(daemon: Daemon, binding: str, *, expect: str, timeout_s: float = 10.0) -> str | None:
    """The node `daemon` reports as holding `binding`, once it is `expect` (or the last seen)."""
    found = None
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with client_of(daemon) as client:
        while asyncio.get_running_loop().time() < deadline:
            rows = (await client.call("channels.status"))["channels"]
            found = next(r for r in rows if r["id"] == binding).get("holder")
            if found == expect:
                break
            await asyncio.sleep(0.1)
    return str(found) if found else None


async def test_a_discord_account_fails_over_and_finishes_the_reply_once(cluster: Cluster) -> None:
    async with platforms() as (discord, _):
        cluster.extra_config = bindings_toml(discord, None)
        a = await start(cluster, "a")
        async with client_of(a) as client:
            await channels_ready(client, "discord:default")
        b = await start(cluster, "b")
        assert await holder(b, "discord:default", expect="a") == "a"  # b stands by
        await discord.dispatch_message(CHANNEL, "!long 300")
        await settle(lambda: bot_messages(discord, CHANNEL) and discord.edits)
        await discord.dispatch_message(CHANNEL, "second question")  # steered into the run
        await asyncio.sleep(0.3)
        shown = len(words(bot_messages(discord, CHANNEL)[0]["content"]))
        a.kill()
        async with client_of(b) as client:
            await channels_ready(client, "discord:default", timeout=LEASE_TTL_S + 10)
            await settle(lambda: texts_of(discord)[1:] == ["echo: second question"], timeout=20)
            await settle(lambda: texts_of(discord)[0].endswith(NOTICE))
            await asyncio.sleep(0.5)
            replies = texts_of(discord)
            assert len(replies) == 2
            cut = words(replies[0])
            assert len(cut) >= shown and cut == [f"w{i}" for i in range(1, len(cut) + 1)]
            key = f"agent:main:discord:channel:{CHANNEL}"
            assert await stop_reasons(client, key) == ["aborted", "stop"]
        assert len(discord.posts) == 2, [p.get("content", "")[:40] for p in discord.posts]
        assert await holder(b, "discord:default", expect="b") == "b"


async def test_a_slack_account_fails_over_and_posts_nothing_twice(cluster: Cluster) -> None:
    async with SlackStandIn() as slack:
        cluster.extra_config = bindings_toml(None, slack, extra="chunk_limit = 400\n")
        a = await start(cluster, "a")
        async with client_of(a) as client:
            await channels_ready(client, "slack:default")
        b = await start(cluster, "b")
        assert await holder(b, "slack:default", expect="a") == "a"
        event = slack.message_event(SLACK_CHANNEL, "!long 300")
        await slack.send_event(event)
        thread = event["ts"]
        await settle(lambda: slack.posts and slack.updates)
        second = await slack.send_event(
            slack.message_event(SLACK_CHANNEL, "second question", thread_ts=thread)
        )
        await settle(lambda: second["event_id"] in slack.acked_event_ids())
        await asyncio.sleep(0.3)
        shown = len(words(" ".join(slack.bot_texts(SLACK_CHANNEL, thread))))
        a.kill()
        async with client_of(b) as client:
            await channels_ready(client, "slack:default", timeout=LEASE_TTL_S + 10)
            await settle(lambda: slack.bot_texts(SLACK_CHANNEL, thread)[-1:] == ["echo: second question"])
            await settle(lambda: slack.bot_texts(SLACK_CHANNEL, thread)[-2].endswith(NOTICE))
            await asyncio.sleep(0.5)
            *reply, answer = slack.bot_texts(SLACK_CHANNEL, thread)
            assert answer == "echo: second question"
            cut = words(" ".join(reply))
            assert len(cut) >= shown > 0 and cut == [f"w{i}" for i in range(1, len(cut) + 1)]
            keys = [post["metadata"]["event_payload"]["key"] for post in slack.posts]
            assert len(keys) == len(set(keys)) == len(reply) + 1  # one message per chunk, none twice
            key = f"agent:main:slack:channel:c1:thread:{thread}"
            assert await stop_reasons(client, key) == ["aborted", "stop"]
        assert await holder(b, "slack:default", expect="b") == "b"
