"""The signed Events API endpoint: HMAC v0 verified for real, replays deduplicated."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from bindings.config import SlackAccountConfig
from bindings.errors import BindingConfigError, SignatureError
from bindings.slack import SlackBinding, verify_slack_request
from bindings.state import ConnectionState
from tests.bindings.helpers import wait_until
from tests.bindings.memory_host import MemoryHost
from tests.bindings.standins.slack import SlackStandIn
from tests.bindings.standins.slack_events import SlackEventsClient, slack_signature

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def test_verify_slack_request() -> None:
    body = b'{"type":"event_callback"}'
    now = 1_700_000_000
    good = {
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": slack_signature(SECRET.encode(), str(now), body),
    }
    verify_slack_request(SECRET, good, body, now=now + 299)
    with pytest.raises(SignatureError, match="window"):
        verify_slack_request(SECRET, good, body, now=now + 301)
    with pytest.raises(SignatureError, match="window"):
        verify_slack_request(SECRET, good, body, now=now - 301)
    with pytest.raises(SignatureError, match="invalid"):
        verify_slack_request(SECRET, good, body + b" ", now=now)
    with pytest.raises(SignatureError, match="invalid"):
        verify_slack_request("other-secret", good, body, now=now)
    with pytest.raises(SignatureError, match="missing"):
        verify_slack_request(SECRET, {"x-slack-request-timestamp": str(now)}, body, now=now)
    with pytest.raises(SignatureError, match="integer"):
        verify_slack_request(SECRET, {**good, "x-slack-request-timestamp": "soon"}, body, now=now)


@pytest.fixture
async def events(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> AsyncIterator[tuple[SlackBinding, SlackEventsClient]]:
    config = SlackAccountConfig(
        api_base_url=slack.api_base_url, mode="events", group_policy="open", require_mention=False
    )
    env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_SIGNING_SECRET": SECRET}
    async with SlackBinding(config, host, http, env=env) as binding:
        async with asyncio.timeout(5):
            await binding.wait_for_state(ConnectionState.READY)
        transport = httpx.ASGITransport(app=binding.events_app())
        async with httpx.AsyncClient(transport=transport) as client:
            yield binding, SlackEventsClient(client, "http://gateway/bindings/slack/default/events", SECRET)


async def test_url_verification_is_answered(events: tuple[SlackBinding, SlackEventsClient]) -> None:
    _, client = events
    response = await client.url_verification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


async def test_a_replayed_request_is_processed_once(
    events: tuple[SlackBinding, SlackEventsClient], slack: SlackStandIn, host: MemoryHost
) -> None:
    _, client = events
    payload = slack.callback(slack.message_event("C1", "once"))
    first = await client.send(payload)
    assert first.status_code == 200
    assert len(host.submitted) == 1, "the input is recorded before Slack gets its 200"
    again = await client.send(payload, retry_num=1)
    replay = await client.send(payload)
    assert (again.status_code, replay.status_code) == (200, 200)
    assert [m.text for m in host.submitted] == ["once"]
    run_id = host.results[host.submitted[0].idempotency_key].run_id
    assert run_id is not None
    host.emit(host.submitted[0].session_key, run_id, "final", "done")
    await wait_until(lambda: slack.bot_texts("C1") == ["done"])


async def test_an_event_that_could_not_be_recorded_gets_503_and_its_retry_runs(
    events: tuple[SlackBinding, SlackEventsClient], slack: SlackStandIn, host: MemoryHost
) -> None:
    _, client = events
    payload = slack.callback(slack.message_event("C1", "while the database is busy"))
    host.reject_next = "database is locked"
    first = await client.send(payload)
    assert first.status_code == 503 and host.submitted == []
    retry = await client.send(payload, retry_num=1)
    assert retry.status_code == 200
    assert [m.text for m in host.submitted] == ["while the database is busy"]


async def test_forged_stale_and_tampered_requests_are_rejected(
    events: tuple[SlackBinding, SlackEventsClient], slack: SlackStandIn, host: MemoryHost
) -> None:
    _, client = events
    payload = slack.callback(slack.message_event("C1", "evil"))
    assert (await client.send(payload, forge=True)).status_code == 401
    assert (await client.send(payload, timestamp=int(time.time()) - 301)).status_code == 401
    assert (await client.send(payload, tamper=True)).status_code == 401
    assert host.submitted == []
    assert (await client.send(payload, timestamp=int(time.time()) - 200)).status_code == 200
    assert len(host.submitted) == 1


async def test_socket_mode_has_no_events_endpoint(
    slack: SlackStandIn, host: MemoryHost, http: httpx.AsyncClient
) -> None:
    config = SlackAccountConfig(api_base_url=slack.api_base_url)
    env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    binding = SlackBinding(config, host, http, env=env)
    with pytest.raises(BindingConfigError):
        binding.events_app()
    await binding.aclose()
