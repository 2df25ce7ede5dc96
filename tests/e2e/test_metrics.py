"""`GET /metrics` of the real daemon: refused without the token, and during and after faux runs
every family is there with values that match what the runs did."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.client import GatewayClient
from tests.bindings.standins.discord import DiscordStandIn
from tests.daemon import Daemon, running_daemon, start_daemon
from tests.e2e.helpers import free_port

KEY = "agent:main:metrics"

FAMILIES = {
    # name: type
    "gateway_runs_started": "counter",
    "gateway_runs_finished": "counter",
    "gateway_run_duration_seconds": "histogram",
    "gateway_run_first_token_seconds": "histogram",
    "gateway_model_calls": "counter",
    "gateway_model_call_duration_seconds": "histogram",
    "gateway_model_tokens": "counter",
    "gateway_model_cost_usd": "counter",
    "gateway_tool_calls": "counter",
    "gateway_tool_call_duration_seconds": "histogram",
    "gateway_provider_requests": "counter",
    "gateway_provider_retries": "counter",
    "gateway_provider_errors": "counter",
    "gateway_journal_commit_seconds": "histogram",
    "gateway_journal_commit_items": "histogram",
    "gateway_channel_messages": "counter",
    "gateway_events_published": "counter",
    "gateway_events_delivered": "counter",
    "gateway_slow_consumer_closes": "counter",
    "gateway_fanout_queued_bytes": "gauge",
    "gateway_connections": "gauge",
    "gateway_journal_pending_items": "gauge",
    "gateway_lane_depth": "gauge",
    "gateway_inputs_queued": "gauge",
    "gateway_run_slots": "gauge",
    "gateway_runs_in_flight": "gauge",
    "gateway_live_sessions": "gauge",
    "gateway_channel_outbox_pending": "gauge",
}


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.types = {}
        self.samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= set(ls))


def scrape(url: str, token: str | None) -> Scrape:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(url, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


@pytest.fixture
def paced(gateway_home: Path) -> Iterator[Daemon]:
    with running_daemon(gateway_home, env={"GATEWAY_FAUX_PACE_MS": "10"}) as daemon:
        yield daemon


def test_metrics_need_the_gateway_token(daemon: Daemon) -> None:
    url = daemon.http_url + "/metrics"
    assert httpx.get(url, timeout=10).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer " + "x" * 32}, timeout=10)
    assert wrong.status_code == 401
    assert wrong.headers["www-authenticate"] == "Bearer"
    basic = httpx.get(url, headers={"Authorization": f"Basic {daemon.token}"}, timeout=10)
    assert basic.status_code == 401
    assert "gateway_runs_started" not in wrong.text
    assert scrape(url, daemon.token).types["gateway_runs_started"] == "counter"


async def test_a_named_token_scrapes_only_with_operator_read(daemon: Daemon) -> None:
    url = daemon.http_url + "/metrics"
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        reader = await client.call("tokens.create", {"name": "prometheus", "scopes": ["operator.read"]})
        writer = await client.call("tokens.create", {"name": "poster", "scopes": ["operator.approvals"]})
    assert scrape(url, reader["token"]).types["gateway_runs_started"] == "counter"
    refused = httpx.get(url, headers={"Authorization": f"Bearer {writer['token']}"}, timeout=10)
    assert refused.status_code == 401 and "operator.read" in refused.text


async def test_each_family_during_and_after_runs(paced: Daemon) -> None:
    url = paced.http_url + "/metrics"
    before = await asyncio.to_thread(scrape, url, paced.token)
    assert {name: before.types.get(name) for name in FAMILIES} == FAMILIES
    assert before.value("gateway_runs_started_total") == 0

    async with GatewayClient(paced.url, token=paced.token) as client:
        await client.call("sessions.events.subscribe", {"key": KEY})
        await client.call(
            "chat.send", {"sessionKey": KEY, "message": "!long 150", "idempotencyKey": "m-long"}
        )
        # During the run: it is in flight, and its first token has been counted.
        during = await _scrape_until(
            url, paced.token, lambda s: s.value("gateway_run_first_token_seconds_count") == 1
        )
        assert during.value("gateway_runs_in_flight") == 1
        assert during.value("gateway_runs_started_total") == 1
        assert during.value("gateway_runs_finished_total", reason="no_tool_calls") == 0
        assert during.value("gateway_live_sessions") >= 1
        assert during.value("gateway_run_slots", state="active") == 1
        assert during.value("gateway_connections", role="admin") == 1
        assert during.value("gateway_events_published_total") > before.value("gateway_events_published_total")
        assert during.value("gateway_events_delivered_total") > 0
        assert during.value("gateway_journal_commit_seconds_count") > 0
        assert (await client.call("agent.wait", {"runId": "m-long", "timeoutMs": 20_000}))["status"] == "ok"

        for run_id, message in (("m-tool", '!tool ls {"path": "."}'), ("m-err", "!error the model broke")):
            await client.call("chat.send", {"sessionKey": KEY, "message": message, "idempotencyKey": run_id})
            await client.call("agent.wait", {"runId": run_id, "timeoutMs": 20_000})

        after = await _scrape_until(url, paced.token, lambda s: s.total("gateway_runs_finished_total") == 3)
    assert after.value("gateway_runs_started_total") == 3
    assert after.value("gateway_runs_finished_total", reason="no_tool_calls") == 2
    assert after.value("gateway_runs_finished_total", reason="error") == 1
    assert after.value("gateway_runs_in_flight") == 0
    assert after.value("gateway_run_slots", state="active") == 0
    # The 150-word reply streams at 10 ms a word: its run lasted over a second.
    assert after.value("gateway_run_duration_seconds_bucket", reason="no_tool_calls", le="1.0") <= 1
    assert after.value("gateway_run_duration_seconds_count", reason="no_tool_calls") == 2
    assert after.value("gateway_run_duration_seconds_sum", reason="no_tool_calls") > 1.0
    # The run whose model failed streamed no token.
    assert after.value("gateway_run_first_token_seconds_count") == 2
    faux = {"provider": "faux", "model": "echo"}
    # Model calls: the long reply, the tool call and the answer after it, the error.
    assert after.value("gateway_model_calls_total", **faux, stop_reason="stop") == 2
    assert after.value("gateway_model_calls_total", **faux, stop_reason="toolUse") == 1
    assert after.value("gateway_model_calls_total", **faux, stop_reason="error") == 1
    assert after.value("gateway_model_call_duration_seconds_count", **faux) == 4
    assert after.value("gateway_model_tokens_total", **faux, kind="output") > 150
    assert after.value("gateway_model_tokens_total", **faux, kind="input") > 0
    assert ("gateway_model_cost_usd_total", tuple(sorted(faux.items()))) in after.samples
    assert after.value("gateway_tool_calls_total", tool="ls", outcome="ok") == 1
    assert after.value("gateway_tool_call_duration_seconds_count", tool="ls") == 1
    assert after.value("gateway_journal_commit_items_sum") >= after.value(
        "gateway_journal_commit_items_count"
    )
    assert after.value("gateway_journal_pending_items") == 0
    assert after.value("gateway_lane_depth", unit="operations") == 0
    assert after.value("gateway_inputs_queued") == 0
    assert after.value("gateway_slow_consumer_closes_total") == 0
    # The faux model makes no HTTP request.
    assert after.total("gateway_provider_requests_total") == 0
    # The client has gone: no connection is left.
    gone = await _scrape_until(url, paced.token, lambda s: s.total("gateway_connections") == 0)
    assert gone.value("gateway_fanout_queued_bytes", kind="buffered") == 0


def test_metrics_on_a_port_of_their_own(gateway_home: Path) -> None:
    port = free_port()
    with running_daemon(gateway_home, config=f"[metrics]\nport = {port}\n") as daemon:
        # No token on the loopback port; the gateway's port no longer serves them.
        separate = scrape(f"http://127.0.0.1:{port}/metrics", None)
        assert separate.types["gateway_runs_started"] == "counter"
        main = httpx.get(daemon.http_url + "/metrics", headers={"Authorization": f"Bearer {daemon.token}"})
        assert main.status_code == 404
        assert httpx.get(f"http://127.0.0.1:{port}/other", timeout=10).status_code == 404
        assert httpx.post(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 405


async def _scrape_until(
    url: str, token: str, ready: Callable[[Scrape], bool], timeout: float = 20.0
) -> Scrape:
    """The first scrape for which `ready` holds; fails after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        current = await asyncio.to_thread(scrape, url, token)
        if ready(current):
            return current
        assert asyncio.get_running_loop().time() < deadline, current.text
        await asyncio.sleep(0.05)


async def test_chat_channel_messages_and_outbox(gateway_home: Path) -> None:
    async with DiscordStandIn(heartbeat_interval_ms=1000) as discord:
        discord.add_channel("500", guild_id="900")
        config = (
            f'[bindings.discord.default]\napi_base_url = "{discord.api_base_url}"\n'
            'group_policy = "open"\nrequire_mention = false\nedit_interval_s = 0.2\n'
        )
        env = {"DISCORD_BOT_TOKEN": "discord-test-token"}
        daemon = await asyncio.to_thread(start_daemon, gateway_home, config=config, env=env)
        try:
            url = daemon.http_url + "/metrics"
            async with GatewayClient(daemon.url, token=daemon.token) as client:
                await _until_ready(client)
            await discord.dispatch_message("500", "hello over there")
            await _scrape_until(url, daemon.token, lambda s: s.total("gateway_runs_finished_total") == 1)
            await discord.dispatch_message("500", "!long 500")  # past Discord's 2000 characters: 2 chunks
            after = await _scrape_until(
                url,
                daemon.token,
                lambda s: (
                    s.value("gateway_channel_messages_total", channel="discord", direction="out") >= 3
                    and s.total("gateway_runs_finished_total") == 2
                    and s.value("gateway_channel_outbox_pending", channel="discord") == 0
                ),
            )
        finally:
            await asyncio.to_thread(daemon.stop)
    posted = [m for m in discord.channels["500"].messages if m["author"]["id"] == discord.bot_user_id]
    assert after.value("gateway_channel_messages_total", channel="discord", direction="in") == 2
    assert (
        after.value("gateway_channel_messages_total", channel="discord", direction="out") == len(posted) == 3
    )
    assert after.value("gateway_channel_outbox_pending", channel="discord") == 0


async def _until_ready(client: GatewayClient, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = (await client.call("channels.status"))["channels"]
        if rows and all(row["state"] == "ready" for row in rows):
            return
        assert asyncio.get_running_loop().time() < deadline, rows
        await asyncio.sleep(0.05)
