"""The Slack Web API client against the stand-in."""

from __future__ import annotations

import httpx
import pytest

from bindings.errors import PlatformRequestError
from bindings.slack.web import SlackWeb
from tests.bindings.standins.slack import SlackStandIn


def web_for(slack: SlackStandIn, http: httpx.AsyncClient) -> SlackWeb:
    return SlackWeb(
        http,
        base_url=slack.api_base_url,
        bot_token=slack.bot_token,
        app_token=slack.app_token,
        backoff_s=0.05,
    )


async def test_auth_and_fresh_connection_urls(slack: SlackStandIn, http: httpx.AsyncClient) -> None:
    web = web_for(slack, http)
    info = await web.auth_test()
    assert (info.user_id, info.team_id, info.bot_id) == (slack.user_id, slack.team_id, slack.bot_id)
    first, second = await web.open_connection(), await web.open_connection()
    assert first != second and first.startswith("ws://127.0.0.1:")


async def test_a_post_whose_answer_was_lost_is_found_not_reposted(slack: SlackStandIn) -> None:
    async with httpx.AsyncClient(timeout=0.2) as http:
        web = web_for(slack, http)
        slack.delay_next_post(0.6)
        ts = await web.post_message("C1", "exactly once", key="k-1")
    assert slack.post_attempts == 1
    assert [p["text"] for p in slack.posts] == ["exactly once"]
    assert ts == slack.posts[0]["ts"]
    assert web.reconciled == 1


async def test_a_lost_post_that_never_landed_is_posted_again(slack: SlackStandIn) -> None:
    async with httpx.AsyncClient(timeout=0.2) as http:
        web = web_for(slack, http)
        slack.delay_next_post(0.6)
        await web.post_message("C1", "first", key="k-1")
        # the message "k-2" looks for is not there: it is posted
        slack.messages["C1"].clear()
        ts = await web.post_message("C1", "second", key="k-2")
    assert [p["text"] for p in slack.posts] == ["first", "second"]
    assert ts == slack.posts[1]["ts"]


async def test_threaded_posts_are_found_in_the_thread(slack: SlackStandIn) -> None:
    async with httpx.AsyncClient(timeout=0.2) as http:
        web = web_for(slack, http)
        parent = slack.message_event("C1", "parent")
        slack.delay_next_post(0.6)
        ts = await web.post_message("C1", "threaded", key="k-t", thread_ts=parent["ts"])
    assert slack.post_attempts == 1
    assert ts == slack.posts[0]["ts"] and slack.posts[0]["thread_ts"] == parent["ts"]


async def test_refusals_and_throttling(slack: SlackStandIn, http: httpx.AsyncClient) -> None:
    web = web_for(slack, http)
    with pytest.raises(PlatformRequestError) as info:
        await web.update_message("C1", "1.000", "nope")
    assert info.value.code == "message_not_found"
    wrong = SlackWeb(http, base_url=slack.api_base_url, bot_token=slack.app_token)
    with pytest.raises(PlatformRequestError) as info:
        await wrong.auth_test()
    assert info.value.code == "not_allowed_token_type"
    slack.force_429("chat.update", times=1, retry_after=1)
    ts = await web.post_message("C1", "v1", key="k")
    await web.update_message("C1", ts, "v2")
    assert slack.bot_texts("C1") == ["v2"]
    assert web.limiter.throttled == 1
    message = slack.message_event("C1", "react")
    await web.add_reaction("C1", message["ts"], ":tada:")
    await web.add_reaction("C1", message["ts"], "tada")
    assert slack.reactions == [("C1", message["ts"], "tada")]


async def test_a_post_a_previous_process_may_have_made_is_looked_for_first(
    slack: SlackStandIn, http: httpx.AsyncClient
) -> None:
    web = web_for(slack, http)
    ts = await web.post_message("C1", "made before the crash", key="k-crash")
    again = await web.post_message("C1", "made before the crash", key="k-crash", maybe_sent=True)
    assert again == ts and slack.post_attempts == 1 and web.reconciled == 1
    # found with an older text: it is brought up to the text asked for, not posted again
    assert await web.post_message("C1", "made, then finished", key="k-crash", maybe_sent=True) == ts
    assert slack.post_attempts == 1 and slack.updates[-1].text == "made, then finished"
    # not there: posted
    other = await web.post_message("C1", "never made", key="k-new", maybe_sent=True)
    assert other != ts and slack.post_attempts == 2
    assert slack.bot_texts("C1") == ["made, then finished", "never made"]


async def test_the_lookup_reads_a_long_thread_page_by_page(
    slack: SlackStandIn, http: httpx.AsyncClient
) -> None:
    web = SlackWeb(http, base_url=slack.api_base_url, bot_token=slack.bot_token, history_limit=10)
    parent = slack.message_event("C1", "parent")
    for i in range(25):
        slack.message_event("C1", f"chatter {i}", thread_ts=parent["ts"])
    ts = await web.post_message("C1", "late in the thread", key="k-late", thread_ts=parent["ts"])
    assert await web.find_by_key("C1", "k-late", thread_ts=parent["ts"]) == ts
    pages = [c for c in slack.calls if c[0] == "conversations.replies"]
    assert len(pages) == 3  # 27 messages, 10 a page
    short = SlackWeb(
        http, base_url=slack.api_base_url, bot_token=slack.bot_token, history_limit=10, history_pages=2
    )
    assert await short.find_by_key("C1", "k-late", thread_ts=parent["ts"]) is None
