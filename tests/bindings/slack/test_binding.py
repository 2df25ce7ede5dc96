"""SlackBinding end to end against the Slack stand-in (Socket Mode), with the in-memory host."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from bindings.chunking import chunk_text
from bindings.config import SlackAccountConfig
from bindings.slack import SlackBinding
from bindings.state import ConnectionState
from tests.bindings.helpers import account_settings, ready, stream_reply, wait_until
from tests.bindings.memory_host import MemoryHost
from tests.bindings.standins.slack import SlackStandIn

CHANNEL = "C1"


def make_binding(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient, **settings: Any
) -> SlackBinding:
    config = SlackAccountConfig(**account_settings(slack.api_base_url, **settings))
    env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    return SlackBinding(config, host, http, env=env, reconnect_backoff=(0.05, 0.2))


async def test_message_gets_one_streamed_threaded_reply(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http, reply_in_thread=True, chunk_limit=1000) as binding:
        await ready(binding)
        assert binding.auth is not None and binding.auth.user_id == slack.user_id
        event = slack.message_event(CHANNEL, "summarise the incident")
        await slack.send_event(event)
        await wait_until(lambda: host.submitted)
        inbound = host.submitted[0]
        assert inbound.session_key == f"agent:main:slack:channel:c1:thread:{event['ts']}"
        assert inbound.reply_route.thread_id == event["ts"]
        assert inbound.team_id == slack.team_id
        parts = [f"Point {i}: " + "the service degraded " * 6 + "\n" for i in range(20)]
        text = await stream_reply(binding, host, inbound, parts)
    expected = chunk_text(text, 1000)
    assert len(expected) >= 2
    assert slack.bot_texts(CHANNEL, thread_ts=event["ts"]) == expected
    assert len(slack.posts) == len(expected)
    assert slack.updates, "the head message was edited while streaming"
    assert slack.unacked() == []


async def test_disconnect_reconnects_with_a_fresh_url(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        await slack.disconnect("refresh_requested")
        await wait_until(lambda: len(slack.sockets) == 2 and not slack.sockets[1].closed)
        await ready(binding)
        await slack.send_event(slack.message_event(CHANNEL, "after the refresh"))
        await wait_until(lambda: host.submitted)
    assert len(slack.opened_urls) == 2 and slack.opened_urls[0] != slack.opened_urls[1]
    assert slack.rejected_tickets == 0
    assert slack.sockets[0].closed
    assert host.submitted[0].text == "after the refresh"
    assert host.state_history("slack:default")[-4:] == ["ready", "resuming", "ready", "closed"]


async def test_a_retried_envelope_is_processed_once(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        event = slack.message_event(CHANNEL, "only once please")
        payload = await slack.send_event(event)
        await slack.send_event(event, event_id=payload["event_id"], retry_attempt=1)
        # the same message again under another event id (a mention arrives as two events)
        await slack.send_event({**event, "type": "app_mention"})
        await slack.wait_for(lambda: len(slack.envelopes) == 3 and not slack.unacked())
        await wait_until(lambda: host.submitted)
        await asyncio.sleep(0.1)
    assert [m.text for m in host.submitted] == ["only once please"]


async def test_a_retry_whose_first_delivery_was_lost_is_processed(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        await slack.send_event(slack.message_event(CHANNEL, "second chance"), retry_attempt=2)
        await wait_until(lambda: host.submitted)


async def test_link_disabled_stops_the_binding(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        await slack.disconnect("link_disabled")
        await wait_until(lambda: binding.state is ConnectionState.CLOSED)
        await asyncio.sleep(0.2)
    assert len(slack.opened_urls) == 1


async def test_mentions_threads_and_bots(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http, require_mention=True) as binding:
        await ready(binding)
        await slack.send_event(slack.message_event(CHANNEL, "chatter"))
        await slack.send_event(slack.message_event(CHANNEL, "from a bot", mention=True, bot_id="BOTHER"))
        await slack.send_event(slack.message_event(CHANNEL, "own", user=slack.user_id, mention=True))
        top = slack.message_event(CHANNEL, "hey bot", mention=True)
        await slack.send_event(top)
        await slack.send_event(
            slack.message_event(CHANNEL, "in the thread", thread_ts=top["ts"], mention=True)
        )
        await wait_until(lambda: len(host.submitted) == 2)
        await asyncio.sleep(0.1)
    first, threaded = host.submitted
    assert first.text == "hey bot" and first.session_key == "agent:main:slack:channel:c1"
    assert first.reply_route.thread_id is None
    assert threaded.session_key == f"agent:main:slack:channel:c1:thread:{top['ts']}"
    assert threaded.reply_route.thread_id == top["ts"]


async def test_direct_messages_pair_first(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http, dm_scope="per-peer") as binding:
        await ready(binding)
        await slack.send_event(slack.message_event("D1", "hello", user="U9", channel_type="im"))
        await wait_until(lambda: slack.bot_texts("D1"))
        [request] = await host.pairing_list()
        assert request.code in slack.bot_texts("D1")[0]
        await host.pairing_approve(request.code)
        await slack.send_event(slack.message_event("D1", "hello again", user="U9", channel_type="im"))
        await wait_until(lambda: host.submitted)
    assert host.submitted[0].session_key == "agent:main:direct:u9"


async def test_channel_tools(slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient) -> None:
    async with make_binding(slack, host, http, reply_in_thread=True) as binding:
        await ready(binding)
        event = slack.message_event(CHANNEL, "please react")
        await slack.send_event(event)
        await wait_until(lambda: host.submitted)
        key = host.submitted[0].session_key
        assert binding.tools_for("agent:main:slack:channel:c2") == []
        tools = {t.name: t for t in binding.tools_for(key)}
        assert set(tools) == {"slack_add_reaction", "slack_send_file"}
        await tools["slack_add_reaction"].execute("c1", {"name": ":eyes:"}, None, None)
        await tools["slack_add_reaction"].execute("c2", {"name": "eyes"}, None, None)
        await tools["slack_send_file"].execute(
            "c3", {"filename": "report.csv", "content": "YSxiCjEsMg==", "encoding": "base64"}, None, None
        )
    assert slack.reactions == [(CHANNEL, event["ts"], "eyes")]
    [entry] = slack.files.values()
    assert entry["data"] == b"a,b\n1,2"
    assert (entry["channel"], entry["thread_ts"], entry["title"]) == (CHANNEL, event["ts"], "report.csv")


async def test_rate_limited_post_waits_and_posts_once(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        await slack.send_event(slack.message_event(CHANNEL, "hi"))
        await wait_until(lambda: host.submitted)
        inbound = host.submitted[0]
        run_id = host.results[inbound.idempotency_key].run_id
        assert run_id is not None
        slack.force_429("chat.postMessage", times=1, retry_after=1)
        host.emit(inbound.session_key, run_id, "final", "hello after the pause")
        await wait_until(lambda: slack.bot_texts(CHANNEL), timeout=5)
    throttled = [c for c in slack.calls if c[0] == "chat.postMessage" and c[1] == 429]
    posted = [c for c in slack.calls if c[0] == "chat.postMessage" and c[1] == 200]
    assert len(throttled) == 1 and len(posted) == 1
    assert posted[0][2] - throttled[0][2] >= 0.95
    assert slack.bot_texts(CHANNEL) == ["hello after the pause"]


async def test_an_envelope_is_acked_only_once_its_input_is_recorded(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    host.hold_submits = asyncio.Event()
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        payload = await slack.send_event(slack.message_event(CHANNEL, "record me first"))
        await wait_until(lambda: host.submit_calls == 1)
        await asyncio.sleep(0.2)
        assert len(slack.unacked()) == 1  # the database is still writing: no ack yet
        host.hold_submits.set()
        await slack.wait_for(lambda: not slack.unacked())
    assert [m.text for m in host.submitted] == ["record me first"]
    assert slack.acked_event_ids() == [payload["event_id"]]


async def test_an_event_the_host_could_not_record_is_left_unacked_and_runs_when_redelivered(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    host.reject_next = "the gateway is stopping"
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        payload = await slack.send_event(slack.message_event(CHANNEL, "not yet"))
        await wait_until(lambda: host.submit_calls == 1)
        await asyncio.sleep(0.2)
        assert len(slack.unacked()) == 1 and not host.submitted
        assert await slack.redeliver_unacked() == 1  # Slack's retry after its ack window
        await slack.wait_for(lambda: not slack.unacked())
        await asyncio.sleep(0.1)
    assert [m.text for m in host.submitted] == ["not yet"]
    assert slack.acked_event_ids() == [payload["event_id"]]
    assert [e["retry_attempt"] for e in slack.envelopes.values()] == [0, 1]


async def test_an_event_cut_off_by_a_reconnect_is_redelivered_and_runs_once(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    host.hold_submits = asyncio.Event()
    async with make_binding(slack, host, http) as binding:
        await ready(binding)
        await slack.send_event(slack.message_event(CHANNEL, "across the reconnect"))
        await wait_until(lambda: host.submit_calls == 1)
        await slack.disconnect("refresh_requested")  # the ack can no longer be sent on that socket
        await wait_until(lambda: len(slack.envelopes) == 2)  # delivered again on the new socket
        host.hold_submits.set()
        await slack.wait_for(lambda: not slack.unacked())
        await asyncio.sleep(0.1)
    assert [m.text for m in host.submitted] == ["across the reconnect"]
    first, second = slack.envelopes.values()
    assert first["acked_at"] is None and second["acked_at"] is not None
    assert second["retry_attempt"] == 1
