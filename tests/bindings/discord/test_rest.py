"""The Discord REST client against the stand-in: idempotent sends, rate-limit buckets, errors."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from bindings.discord.rest import DiscordRest
from bindings.discord.transport import DiscordTransport
from bindings.errors import PlatformRequestError, PlatformUnavailableError
from bindings.host import ReplyRoute
from tests.bindings.helpers import wait_until
from tests.bindings.standins.discord import DiscordStandIn


def rest_for(discord: DiscordStandIn, http: httpx.AsyncClient, **kwargs: object) -> DiscordRest:
    return DiscordRest(http, base_url=discord.api_base_url, token=discord.token, backoff_s=0.01, **kwargs)  # type: ignore[arg-type]


async def test_gateway_bot_points_at_the_gateway(discord: DiscordStandIn, http: httpx.AsyncClient) -> None:
    info = await rest_for(discord, http).get_gateway_bot()
    assert info.url == discord.gateway_url
    assert info.session_start_remaining == 999


async def test_a_post_retried_after_an_ambiguous_timeout_is_not_posted_twice(discord: DiscordStandIn) -> None:
    async with httpx.AsyncClient(timeout=0.2) as http:
        rest = rest_for(discord, http)
        discord.delay_next_create(0.6)
        message = await rest.create_message("500", "exactly once", nonce="nonce-1")
    assert [p["content"] for p in discord.posts] == ["exactly once"]
    assert message["id"] == discord.posts[0]["id"]
    assert discord.create_attempts >= 2, "the request was sent again after the timeout"


async def test_a_recovered_post_adopts_the_earlier_message_and_shows_the_new_text(
    discord: DiscordStandIn, http: httpx.AsyncClient
) -> None:
    discord.add_channel("500", guild_id="900")
    transport = DiscordTransport(rest_for(discord, http))
    route = ReplyRoute(platform="discord", account_id="default", channel_id="500")
    first = await transport.post_message(route, "half a reply", key="k-1")
    again = await transport.post_message(route, "the whole reply", key="k-1", maybe_sent=True)
    assert again == first and len(discord.posts) == 1
    assert [m["content"] for m in discord.channels["500"].messages] == ["the whole reply"]


async def test_bucket_headers_are_honoured(http: httpx.AsyncClient) -> None:
    async with DiscordStandIn(bucket_limit=2, bucket_window_s=0.3) as discord:
        rest = rest_for(discord, http)
        started = time.monotonic()
        for i in range(6):
            await rest.create_message("500", f"message {i}", nonce=f"n{i}")
        elapsed = time.monotonic() - started
    assert discord.violations == 0, "no request was sent into an exhausted bucket"
    assert [p["content"] for p in discord.posts] == [f"message {i}" for i in range(6)]
    assert elapsed >= 0.55
    assert rest.limiter.waits >= 2


async def test_429_pauses_the_route_then_the_same_request_goes_through(
    discord: DiscordStandIn, http: httpx.AsyncClient
) -> None:
    rest = rest_for(discord, http)
    discord.force_429("create", times=2, retry_after=0.15)
    started = time.monotonic()
    await rest.create_message("500", "patient", nonce="p1")
    assert time.monotonic() - started >= 0.28
    assert [p["content"] for p in discord.posts] == ["patient"]
    assert rest.limiter.throttled == 2


async def test_a_global_429_pauses_every_route(discord: DiscordStandIn, http: httpx.AsyncClient) -> None:
    rest = rest_for(discord, http)
    discord.add_channel("600")
    discord.force_429("create", times=1, retry_after=0.3, is_global=True)
    post = asyncio.create_task(rest.create_message("500", "first", nonce="g1"))
    # Wait until the client has read the 429, not just until the stand-in sent it.
    await wait_until(lambda: rest.limiter.throttled == 1)
    paused = rest.limiter.pause_remaining("GET /channels/{channel_id}", "600")
    assert paused > 0.1, paused  # another route, another bucket: the global pause holds it too
    started = time.monotonic()
    await rest.get_channel("600")
    assert time.monotonic() - started >= paused - 0.05
    await post
    assert [p["content"] for p in discord.posts] == ["first"]


async def test_refusals_are_request_errors(discord: DiscordStandIn, http: httpx.AsyncClient) -> None:
    rest = rest_for(discord, http)
    with pytest.raises(PlatformRequestError) as info:
        await rest.create_message("500", "x" * 2001, nonce="too-long")
    assert info.value.status == 400 and info.value.code == 50035
    with pytest.raises(PlatformRequestError) as info:
        await rest.edit_message("500", "123", "nope")
    assert info.value.code == 10008
    wrong = DiscordRest(http, base_url=discord.api_base_url, token="wrong")
    with pytest.raises(PlatformRequestError) as info:
        await wrong.get_gateway_bot()
    assert info.value.status == 401


async def test_an_unreachable_api_is_unavailable_after_bounded_attempts(http: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rest = DiscordRest(
        http, base_url=f"http://127.0.0.1:{port}/api/v10", token="t", backoff_s=0.01, max_attempts=3
    )
    with pytest.raises(PlatformUnavailableError):
        await rest.get_gateway_bot()


async def test_messages_after_are_returned_oldest_first(
    discord: DiscordStandIn, http: httpx.AsyncClient
) -> None:
    first = discord.user_message("500", "a")
    discord.user_message("500", "b")
    discord.user_message("500", "c")
    page = await rest_for(discord, http).messages_after("500", first["id"], 10)
    assert [m["content"] for m in page] == ["b", "c"]


async def test_reactions_files_and_threads(discord: DiscordStandIn, http: httpx.AsyncClient) -> None:
    rest = rest_for(discord, http)
    discord.add_channel("500", guild_id="900")
    message = discord.user_message("500", "hi")
    await rest.add_reaction("500", message["id"], "custom:123")
    sent = await rest.send_file("500", "a.bin", b"\x00\x01", nonce="f1", content="bytes")
    assert discord.reactions == [("500", message["id"], "custom:123")]
    assert discord.files == [("500", sent["id"], "a.bin", b"\x00\x01")]
    assert await rest.start_thread("500", message["id"], "topic") == message["id"]
    assert await rest.start_thread("500", message["id"], "topic") == message["id"]
    assert len(discord.threads_started) == 1
