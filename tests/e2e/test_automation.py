"""End to end: cron jobs and webhooks in the real `gatewayd` (faux/echo model).

Time is real here, and driven by the jobs themselves: intervals of a second and one-off times a
second or two ahead, with `[cron] missed_after_s` (an ordinary setting) lowered so a short
downtime already counts as missed. The clock-controlled cases (time zones, daylight saving,
days of downtime) are in tests/gateway/automation with a clock the test moves.

The Discord and Slack stand-ins run in the test process on loopback, as in test_channels.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from gateway.automation import sign
from gateway.client import CallError, GatewayClient
from tests.bindings.helpers import wait_until
from tests.bindings.standins.discord import DiscordStandIn
from tests.bindings.standins.slack import SlackStandIn
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import module_daemon, wait_for
from tests.sessions.conftest import PG_URL, drop_schema, needs_postgres, url_with_schema

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ci-signing-secret"
TOKEN = "deploy-bearer-token"
DISCORD = {"DISCORD_BOT_TOKEN": "discord-test-token"}
SLACK = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_APP_TOKEN": "xapp-test"}
HOOKS = """
[cron]
missed_after_s = 0.5

[webhooks.ci]
secret_env = "CI_SECRET"
template = "CI failed on {{ repository }} at {{ step }}"
replay_window_s = 60.0

[webhooks.deploys]
token_env = "DEPLOY_TOKEN"
template = "deployed {{ version }}"
session_key = "agent:main:deploys"

[webhooks.tiny]
secret_env = "CI_SECRET"
template = "{{ body }}"
rate_per_minute = 1.0
burst = 2
max_body_bytes = 64
"""


def every(seconds: float, message: str = "tick", **extra: Any) -> dict[str, Any]:
    return {
        "name": f"every-{uuid.uuid4().hex[:6]}",
        "schedule": {"kind": "every", "everyMs": int(seconds * 1000)},
        "sessionTarget": "isolated",
        "wakeMode": "now",
        "payload": {"kind": "agentTurn", "message": message},
        **extra,
    }


def at(moment_ms: int, **extra: Any) -> dict[str, Any]:
    when = datetime.fromtimestamp(moment_ms / 1000, UTC).isoformat(timespec="milliseconds")
    return {**every(1), "name": f"at-{uuid.uuid4().hex[:6]}", "schedule": {"kind": "at", "at": when}, **extra}


def now_ms() -> int:
    return int(time.time() * 1000)


async def runs_of(client: GatewayClient, job_id: str) -> list[dict[str, Any]]:
    """The job's finished runs, oldest first."""
    answer = await client.call("cron.runs", {"id": job_id, "limit": 200, "sortDir": "asc"})
    return list(answer["entries"])


async def until_runs(
    client: GatewayClient, job_id: str, count: int, timeout: float = 20.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        entries = await runs_of(client, job_id)
        if len(entries) >= count:
            return entries
        assert time.monotonic() < deadline, f"{len(entries)} runs of {job_id}, wanted {count}"
        await asyncio.sleep(0.1)


@asynccontextmanager
async def gatewayd(home: Path, config: str, env: dict[str, str], tag: str = "") -> AsyncIterator[Daemon]:
    daemon = await asyncio.to_thread(start_daemon, home, config=config, env=env, tag=tag)
    try:
        yield daemon
    finally:
        await asyncio.to_thread(daemon.stop)


# --- the cron.* methods and webhooks, on one daemon -------------------------------------------


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    env = {"CI_SECRET": SECRET, "DEPLOY_TOKEN": TOKEN}
    with module_daemon(tmp_path_factory, "automation", config=HOOKS, env=env) as daemon:
        yield daemon


@pytest.fixture
async def client(gw: Daemon) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(gw.url, token=gw.token) as connected:
        yield connected


async def test_a_job_runs_on_its_schedule_and_is_managed_with_the_cron_methods(
    gw: Daemon, client: GatewayClient
) -> None:
    job = await client.call("cron.add", every(1, "how are things?"))
    assert job["enabled"] and job["catchUp"] == "latest"
    assert job["state"]["nextRunAtMs"] > job["createdAtMs"]
    added = await wait_for(client, lambda e: e.get("event") == "cron" and e["payload"]["jobId"] == job["id"])
    assert added["payload"]["action"] == "added"

    entries = await until_runs(client, job["id"], 2)
    assert {e["status"] for e in entries} == {"ok"} and {e["trigger"] for e in entries} == {"schedule"}
    assert entries[0]["summary"] == "echo: how are things?"
    assert len({e["slotMs"] for e in entries}) == len(entries)
    assert entries[1]["slotMs"] - entries[0]["slotMs"] == 1000
    await wait_for(client, lambda e: e.get("event") == "cron" and e["payload"]["action"] == "finished")

    listed = await client.call("cron.list", {})
    mine = next(j for j in listed["jobs"] if j["id"] == job["id"])
    assert mine["state"]["lastRunStatus"] == "ok" and mine["lastRunStatus"] == "ok"
    assert listed["total"] >= 1 and listed["hasMore"] is False

    disabled = await client.call("cron.update", {"id": job["id"], "patch": {"enabled": False}})
    assert disabled["enabled"] is False and "nextRunAtMs" not in disabled["state"]
    await asyncio.sleep(0.3)  # a run the scheduler started just before may still finish
    settled = len(await runs_of(client, job["id"]))
    await asyncio.sleep(2.5)
    assert len(await runs_of(client, job["id"])) == settled
    assert all(j["id"] != job["id"] for j in (await client.call("cron.list", {}))["jobs"])
    assert any(
        j["id"] == job["id"] for j in (await client.call("cron.list", {"includeDisabled": True}))["jobs"]
    )

    started = await client.call("cron.run", {"id": job["id"]})
    assert started["ok"] and started["enqueued"]
    await client.call("agent.wait", {"runId": started["runId"], "timeoutMs": 10_000})
    manual = (await runs_of(client, job["id"]))[-1]
    assert (manual["runId"], manual["trigger"], manual["status"]) == (started["runId"], "manual", "ok")
    assert "slotMs" not in manual
    assert (await client.call("cron.run", {"id": job["id"], "mode": "if-enabled"}))["ran"] is False

    status = await client.call("cron.status", {})
    assert status["enabled"] is True and status["jobs"] >= 1
    assert status["webhooks"] == ["ci", "deploys", "tiny"]
    assert (await client.call("cron.remove", {"id": job["id"]})) == {"ok": True, "removed": True}
    with pytest.raises(CallError) as missing:
        await client.call("cron.get", {"jobId": job["id"]})
    assert missing.value.code == "NOT_FOUND"
    assert missing.value.details == {"code": "CRON_JOB_NOT_FOUND", "jobId": job["id"]}


async def test_reading_jobs_needs_read_and_changing_them_admin(gw: Daemon, client: GatewayClient) -> None:
    job = await client.call("cron.add", every(3600))
    async with GatewayClient(gw.url, token=gw.token, scopes=("operator.read", "operator.write")) as writer:
        assert (await writer.call("cron.get", {"id": job["id"]}))["id"] == job["id"]
        await writer.call("cron.runs", {"id": job["id"]})
        for method, params in (
            ("cron.add", every(60)),
            ("cron.update", {"id": job["id"], "patch": {"enabled": False}}),
            ("cron.run", {"id": job["id"]}),
            ("cron.remove", {"id": job["id"]}),
        ):
            with pytest.raises(CallError) as refused:
                await writer.call(method, params)
            assert (
                refused.value.code == "FORBIDDEN"
                and refused.value.details["missingScope"] == "operator.admin"
            )
    await client.call("cron.remove", {"id": job["id"]})


async def test_a_spec_the_gateway_cannot_run_is_refused_naming_the_field(client: GatewayClient) -> None:
    for spec, words in (
        ({**every(1), "schedule": {"kind": "cron", "expr": "99 * * * *"}}, "schedule.expr"),
        ({**every(1), "schedule": {"kind": "cron", "expr": "0 8 * * *", "tz": "Nowhere/City"}}, "time zone"),
        ({**every(1), "agentId": "ghost"}, "unknown agent 'ghost'"),
        ({**every(1), "payload": {"kind": "command", "argv": ["rm"]}}, "payload.kind"),
        ({key: value for key, value in every(1).items() if key != "payload"}, "payload"),
    ):
        with pytest.raises(CallError) as refused:
            await client.call("cron.add", spec)
        assert refused.value.code == "INVALID_REQUEST" and words in str(refused.value), str(refused.value)


# --- webhooks --------------------------------------------------------------------------------


def signed(
    body: bytes, *, secret: str = SECRET, ts: int | None = None, delivery: str | None = None
) -> dict[str, str]:
    stamp = int(time.time()) if ts is None else ts
    headers = {
        "content-type": "application/json",
        "x-gateway-timestamp": str(stamp),
        "x-gateway-signature": sign(secret, stamp, body),
    }
    if delivery is not None:
        headers["x-gateway-delivery"] = delivery
    return headers


async def test_webhooks_signed_forged_stale_replayed_and_retried(gw: Daemon, client: GatewayClient) -> None:
    url = f"{gw.http_url}/hooks/ci"
    body = json.dumps({"repository": "acme/web", "step": "lint"}).encode()
    async with httpx.AsyncClient(timeout=10) as http:
        first_headers = signed(body, delivery="build-1")
        accepted = await http.post(url, content=body, headers=first_headers)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        assert accepted.headers["x-content-type-options"] == "nosniff"  # the front door's headers
        outcome = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 10_000})
        assert outcome["status"] == "ok" and outcome["text"] == "echo: CI failed on acme/web at lint"

        forged = await http.post(url, content=body, headers=signed(body, secret="guess", delivery="x1"))
        assert forged.status_code == 401 and "does not match" in forged.json()["error"]
        tampered = await http.post(url, content=body.replace(b"lint", b"test"), headers=first_headers)
        assert tampered.status_code == 401
        stale = await http.post(
            url, content=body, headers=signed(body, ts=int(time.time()) - 120, delivery="x2")
        )
        assert stale.status_code == 401 and "replay window" in stale.json()["error"]
        unsigned = await http.post(url, content=body, headers={"content-type": "application/json"})
        assert unsigned.status_code == 401

        replayed = await http.post(url, content=body, headers=first_headers)
        assert replayed.status_code == 409 and replayed.json()["runId"] == run_id
        # The same signed request under another delivery id is still the same request.
        relabelled = await http.post(
            url, content=body, headers={**first_headers, "x-gateway-delivery": "build-9"}
        )
        assert relabelled.status_code == 409 and relabelled.json()["runId"] == run_id
        # The sender's retry: a fresh signature, the same delivery id.
        retried = await http.post(
            url, content=body, headers=signed(body, ts=int(time.time()) + 1, delivery="build-1")
        )
        assert retried.status_code == 409 and retried.json()["runId"] == run_id

        # A new delivery (the same signed bytes would be the same delivery, whatever its id).
        second = body.replace(b"lint", b"unit tests")
        other = await http.post(url, content=second, headers=signed(second, delivery="build-2"))
        assert other.status_code == 202 and other.json()["runId"] != run_id
        await client.call("agent.wait", {"runId": other.json()["runId"], "timeoutMs": 10_000})

    # Two deliveries ran, each once, each in a session of its own.
    sessions = await client.call("sessions.list", {"search": "hook:ci:", "limit": 100})
    keys = sorted(row["key"] for row in sessions["sessions"])
    assert len(keys) == 2
    for key in keys:
        history = await client.call("chat.history", {"sessionKey": key})
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]


async def test_webhooks_with_a_bearer_token_and_the_limits(gw: Daemon, client: GatewayClient) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        deploy = f"{gw.http_url}/hooks/deploys"
        body = b'{"version": "1.4.2"}'
        ok = await http.post(deploy, content=body, headers={"authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 202 and ok.json()["sessionKey"] == "agent:main:deploys"
        await client.call("agent.wait", {"runId": ok.json()["runId"], "timeoutMs": 10_000})
        wrong = await http.post(deploy, content=body, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        not_json = await http.post(deploy, content=b"version=1", headers={"authorization": f"Bearer {TOKEN}"})
        assert not_json.status_code == 400
        assert (await http.post(f"{gw.http_url}/hooks/nothing", content=body)).status_code == 404
        assert (await http.get(deploy)).status_code == 405

        tiny = f"{gw.http_url}/hooks/tiny"
        big = json.dumps({"x": "y" * 100}).encode()
        assert (await http.post(tiny, content=big, headers=signed(big))).status_code == 413
        codes = []
        for n in range(4):
            small = json.dumps({"n": n}).encode()
            codes.append((await http.post(tiny, content=small, headers=signed(small))).status_code)
        assert codes[:2] == [202, 202] and codes[2:] == [429, 429]
        limited = await http.post(tiny, content=b'{"n": 9}', headers=signed(b'{"n": 9}'))
        assert int(limited.headers["retry-after"]) >= 1
        # A forged request is refused before it can spend the hook's budget.
        assert (await http.post(tiny, content=b"{}", headers=signed(b"{}", secret="x"))).status_code == 401

        spoofed = await http.post(
            deploy, content=body, headers={"authorization": f"Bearer {TOKEN}", "host": "evil.example"}
        )
        assert spoofed.status_code == 400  # the Host check of the front door


# --- catch-up and restarts ---------------------------------------------------------------------


async def test_catch_up_after_a_restart_across_due_times_follows_each_policy(gateway_home: Path) -> None:
    config = "[cron]\nmissed_after_s = 0.5\n"
    async with AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, config, {}, tag="a"))
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            interval = {
                policy: (await client.call("cron.add", every(1, catchUp=policy)))["id"]
                for policy in ("all", "none")
            }
            for job_id in interval.values():
                await until_runs(client, job_id, 1)
            due = now_ms() + 2000  # falls due while the daemon is down
            once = {
                policy: (await client.call("cron.add", at(due, catchUp=policy)))["id"]
                for policy in ("all", "latest", "none")
            }
        await stack.aclose()  # SIGTERM: the daemon stops
    await asyncio.sleep(3.5)

    async with (
        gatewayd(gateway_home, config, {}, tag="b") as daemon,
        GatewayClient(daemon.url, token=daemon.token) as client,
    ):
        await asyncio.sleep(2.5)
        slots = {}
        for policy, job_id in interval.items():
            entries = await runs_of(client, job_id)
            slots[policy] = [e["slotMs"] for e in entries]
            steps = [b - a for a, b in pairwise(slots[policy])]
            if policy == "all":  # every slot of the downtime ran, late, and only once
                assert set(steps) == {1000}, slots[policy]
                assert sum(e["trigger"] == "catch-up" for e in entries) >= 2
            else:  # the downtime left a hole and nothing ran late
                assert max(steps) >= 3000, slots[policy]
                assert all(e["trigger"] == "schedule" for e in entries)
        assert [e["trigger"] for e in await until_runs(client, once["all"], 1)] == ["catch-up"]
        assert [e["trigger"] for e in await until_runs(client, once["latest"], 1)] == ["catch-up"]
        assert await runs_of(client, once["none"]) == []
        job = await client.call("cron.get", {"id": once["none"]})
        assert "lastRunAtMs" not in job["state"] and "nextRunAtMs" not in job["state"]


async def test_a_crash_at_a_due_time_never_fires_a_slot_twice(gateway_home: Path) -> None:
    daemon = await asyncio.to_thread(start_daemon, gateway_home, tag="a")
    try:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            job_id = (await client.call("cron.add", every(1, "!sleep 300 slow", catchUp="all")))["id"]
            await wait_until(lambda: _fired(daemon.home) >= 1, 10)
        await asyncio.sleep(0.35)
    finally:
        daemon.kill()  # SIGKILL: no shutdown of any kind
    restarted = await asyncio.to_thread(start_daemon, gateway_home, tag="b")
    try:
        async with GatewayClient(restarted.url, token=restarted.token) as client:
            await asyncio.sleep(2.5)
            await client.call("cron.update", {"id": job_id, "patch": {"enabled": False}})
            await asyncio.sleep(1.0)
            entries = await runs_of(client, job_id)
    finally:
        restarted.stop()
    slots = [e["slotMs"] for e in entries]
    assert len(slots) == len(set(slots)) >= 3
    assert set(b - a for a, b in pairwise(sorted(slots))) == {1000}


def _fired(home: Path) -> int:
    """Runs recorded in the daemon's database (read directly: the test must not wait on it)."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{home / 'gateway.db'}?mode=ro", uri=True, timeout=1) as db:
            return int(db.execute("SELECT count(*) FROM cron_runs").fetchone()[0])
    except sqlite3.Error:
        return 0


# --- delivery into the chat stand-ins ----------------------------------------------------------


@asynccontextmanager
async def platforms() -> AsyncIterator[tuple[DiscordStandIn, SlackStandIn]]:
    async with DiscordStandIn(heartbeat_interval_ms=1000) as discord, SlackStandIn() as slack:
        yield discord, slack


def bindings(discord: DiscordStandIn, slack: SlackStandIn) -> str:
    return f"""
[bindings.discord.main]
api_base_url = "{discord.api_base_url}"
edit_interval_s = 0.2

[bindings.slack.work]
api_base_url = "{slack.api_base_url}"
edit_interval_s = 0.2
"""


def bot_texts(discord: DiscordStandIn, channel: str) -> list[str]:
    return [
        m["content"] for m in discord.channels[channel].messages if m["author"]["id"] == discord.bot_user_id
    ]


async def test_jobs_deliver_their_replies_into_discord_and_slack(gateway_home: Path) -> None:
    async with platforms() as (discord, slack), AsyncExitStack() as stack:
        discord.add_channel("500", guild_id="900")
        daemon = await stack.enter_async_context(
            gatewayd(gateway_home, bindings(discord, slack), {**DISCORD, **SLACK})
        )
        client = await stack.enter_async_context(GatewayClient(daemon.url, token=daemon.token))
        to_discord = await client.call(
            "cron.add",
            every(1, "!long 30", delivery={"mode": "announce", "channel": "discord", "to": "channel:500"}),
        )
        to_slack = await client.call(
            "cron.add",
            every(3600, "status report", delivery={"channel": "slack", "to": "C1", "accountId": "work"}),
        )
        nowhere = await client.call(
            "cron.add", every(3600, "lost", delivery={"channel": "slack", "to": "C1", "accountId": "gone"})
        )

        await until_runs(client, to_discord["id"], 1)
        await client.call("cron.update", {"id": to_discord["id"], "patch": {"enabled": False}})
        for job in (to_slack, nowhere):
            started = await client.call("cron.run", {"id": job["id"]})
            await client.call("agent.wait", {"runId": started["runId"], "timeoutMs": 10_000})

        await wait_until(lambda: any("w30" in t for t in bot_texts(discord, "500")), 15)
        await wait_until(lambda: "echo: status report" in slack.bot_texts("C1"), 15)
        await asyncio.sleep(0.5)
        texts = bot_texts(discord, "500")
        assert all(re.fullmatch(r"(w\d+ ?)+", t.strip()) for t in texts), texts
        assert slack.bot_texts("C1") == ["echo: status report"]

        async def delivered(job_id: str) -> list[str]:
            return [e["deliveryStatus"] for e in await runs_of(client, job_id)]

        deadline = time.monotonic() + 10
        while "delivered" not in await delivered(to_discord["id"]) or await delivered(to_slack["id"]) != [
            "delivered"
        ]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        (lost,) = await runs_of(client, nowhere["id"])
        assert (lost["status"], lost["deliveryStatus"]) == ("ok", "not-delivered")
        assert "no slack binding with account 'gone'" in lost["deliveryError"]
        listed = await client.call("cron.get", {"id": to_slack["id"]})
        assert listed["state"]["lastDeliveryStatus"] == "delivered"


# --- the examples of docs/automation.md --------------------------------------------------------


def doc_examples() -> dict[str, dict[str, str]]:
    """Per `### Example:` section of the guide, its TOML and JSON blocks."""
    text = (ROOT / "docs" / "automation.md").read_text()
    out = {}
    for section in text.split("\n### Example: ")[1:]:
        title, _, rest = section.partition("\n")
        body = rest.split("\n## ")[0]
        blocks = {lang: block for lang, block in re.findall(r"```(toml|json)\n(.*?)```", body, re.S)}
        out[title.strip()] = blocks
    return out


def test_the_guide_has_both_examples() -> None:
    examples = doc_examples()
    assert set(examples) == {"a morning summary into a channel", "a CI failure asks an agent to look"}
    assert all(set(blocks) == {"toml", "json"} for blocks in examples.values())


def pointed_at(toml_text: str, discord: DiscordStandIn, slack: SlackStandIn) -> str:
    """The example's config with each binding pointed at its stand-in (the one change)."""
    urls = {"discord": discord.api_base_url, "slack": slack.api_base_url}

    def point(match: re.Match[str]) -> str:
        return f'{match.group(0)}api_base_url = "{urls[match.group(1)]}"\n'

    return re.sub(r"^\[bindings\.(discord|slack)\.[^\]]+\]\n", point, toml_text, flags=re.M)


async def test_the_morning_summary_example_posts_into_its_discord_channel(gateway_home: Path) -> None:
    example = doc_examples()["a morning summary into a channel"]
    params = json.loads(example["json"])
    channel = params["delivery"]["to"].removeprefix("channel:")
    async with platforms() as (discord, slack), AsyncExitStack() as stack:
        discord.add_channel(channel, guild_id="900")
        config = pointed_at(example["toml"], discord, slack)
        daemon = await stack.enter_async_context(gatewayd(gateway_home, config, DISCORD))
        client = await stack.enter_async_context(GatewayClient(daemon.url, token=daemon.token))
        job = await client.call("cron.add", params)

        berlin = datetime.fromtimestamp(job["state"]["nextRunAtMs"] / 1000, ZoneInfo("Europe/Berlin"))
        assert (berlin.hour, berlin.minute) == (8, 0) and berlin.weekday() < 5
        assert berlin - datetime.now(ZoneInfo("Europe/Berlin")) <= timedelta(days=3, hours=1)

        started = await client.call("cron.run", {"id": job["id"]})  # not waiting for 08:00
        await client.call("agent.wait", {"runId": started["runId"], "timeoutMs": 10_000})
        expected = "echo: " + params["payload"]["message"]
        await wait_until(lambda: expected in bot_texts(discord, channel), 15)


async def test_the_ci_failure_example_asks_the_agent_and_posts_the_answer_to_slack(
    gateway_home: Path,
) -> None:
    example = doc_examples()["a CI failure asks an agent to look"]
    body = example["json"].encode()
    delivery = json.loads(body)
    async with platforms() as (discord, slack), AsyncExitStack() as stack:
        config = pointed_at(example["toml"], discord, slack)
        hook = tomllib.loads(config)["webhooks"]["ci-failure"]
        channel = hook["deliver"]["to"]
        env = {**SLACK, hook["secret_env"]: "example-secret"}
        daemon = await stack.enter_async_context(gatewayd(gateway_home, config, env))
        client = await stack.enter_async_context(GatewayClient(daemon.url, token=daemon.token))
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(
                f"{daemon.http_url}/hooks/ci-failure",
                content=body,
                headers=signed(body, secret="example-secret", delivery="ci-run-4711"),
            )
        assert answer.status_code == 202, answer.text
        assert answer.json()["sessionKey"] == "agent:main:ci:acme-web"
        outcome = await client.call("agent.wait", {"runId": answer.json()["runId"], "timeoutMs": 10_000})
        assert outcome["status"] == "ok"
        for fact in (delivery["failed_step"], delivery["url"], delivery["commit"]["author"]):
            assert fact in outcome["text"]
        await wait_until(lambda: any(delivery["url"] in t for t in slack.bot_texts(channel)), 15)


# --- gatewayctl cron ---------------------------------------------------------------------------

CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]


def ctl(gw: Daemon, *args: str, stdin: str = "") -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_URL=gw.url, GATEWAY_TOKEN=gw.token, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [*CTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def test_gatewayctl_adds_lists_runs_updates_and_removes_jobs(gw: Daemon) -> None:
    rc, out, err = ctl(
        gw,
        "cron",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--message",
        "tidy up",
        "--catch-up",
        "none",
        "--json",
    )
    assert rc == 0, err
    job = json.loads(out)
    assert (job["schedule"], job["catchUp"]) == (
        {"kind": "cron", "expr": "0 3 * * *", "tz": "Europe/Berlin"},
        "none",
    )
    rc, out, _ = ctl(gw, "cron", "list")
    assert rc == 0 and "nightly" in out and "cron 0 3 * * * (Europe/Berlin)" in out
    rc, out, _ = ctl(gw, "cron", "run", job["id"], "--json")
    run_id = json.loads(out)["runId"]
    deadline = time.monotonic() + 15
    while True:
        rc, out, _ = ctl(gw, "cron", "runs", job["id"], "--json")
        entries = json.loads(out)["entries"]
        if entries:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert (entries[0]["runId"], entries[0]["status"], entries[0]["summary"]) == (
        run_id,
        "ok",
        "echo: tidy up",
    )
    rc, out, _ = ctl(gw, "cron", "update", job["id"], "--disable", "--every", "2h", "--json")
    assert (
        rc == 0
        and json.loads(out)["enabled"] is False
        and json.loads(out)["schedule"]["everyMs"] == 7_200_000
    )
    rc, out, _ = ctl(gw, "cron", "status", "--json")
    assert rc == 0 and json.loads(out)["enabled"] is True
    rc, _, err = ctl(gw, "cron", "add", "x", "--every", "soon", "--message", "m")
    assert rc == 2 and "not a duration" in err
    rc, _, err = ctl(gw, "cron", "add", "x", "--cron", "99 * * * *", "--message", "m")
    assert rc == 1 and "schedule.expr" in err
    assert ctl(gw, "cron", "remove", job["id"])[0] == 0
    rc, _, err = ctl(gw, "cron", "get", job["id"])
    assert rc == 1 and "no cron job" in err


# --- the dashboard's jobs view -----------------------------------------------------------------


@pytest.mark.browser
async def test_the_dashboard_lists_jobs_runs_one_and_switches_one_off(gateway_home: Path) -> None:
    from playwright.async_api import async_playwright, expect

    from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, _require_chromium, connected

    _require_chromium()
    async with AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(gateway_home, "", {}))
        client = await stack.enter_async_context(GatewayClient(daemon.url, token=daemon.token))
        digest = await client.call("cron.add", {**every(3600, "digest please"), "name": "hourly-digest"})
        await client.call("cron.add", {**every(7 * 86400), "name": "weekly", "enabled": False})
        playwright = await stack.enter_async_context(async_playwright())
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        stack.push_async_callback(browser.close)
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(f"{daemon.http_url}/ui/")
        await page.fill("#auth-secret", daemon.token)
        await page.click("#auth-submit")
        await connected(page)

        await page.click("#automation-toggle")
        row = page.locator(f'tr.job[data-job-id="{digest["id"]}"]')
        await expect(page.locator("tr.job")).to_have_count(2)
        await expect(row.locator(".job-next")).to_have_text(re.compile(r"in (59|60) min"))
        await expect(row.locator(".job-outcome")).to_have_text("never ran")
        await expect(page.locator("#automation-summary")).to_have_text("2 jobs, 1 enabled")

        await row.get_by_role("button", name="Run now").click()
        await expect(row.locator(".job-outcome")).to_have_text("ok", timeout=15_000)
        await row.get_by_role("button", name="Disable").click()
        await expect(row).to_have_attribute("data-enabled", "false")
        await expect(row.locator(".job-next")).to_have_text("off")
        assert not (await client.call("cron.get", {"id": digest["id"]}))["enabled"]
        await page.click("#automation-close")
        await expect(page.locator("#automation")).to_be_hidden()
        assert errors == []


# --- several daemons over one PostgreSQL -------------------------------------------------------


@pytest.mark.postgres
@needs_postgres
async def test_two_daemons_sharing_postgresql_fire_each_slot_once(tmp_path: Path) -> None:
    assert PG_URL is not None
    schema = f"gw_test_{uuid.uuid4().hex[:20]}"
    env = {"GATEWAY_DATABASE_URL": url_with_schema(PG_URL, schema)}
    try:
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(gatewayd(tmp_path / "a", "", env, tag="a"))
            b = await stack.enter_async_context(gatewayd(tmp_path / "b", "", env, tag="b"))
            async with GatewayClient(a.url, token=a.token) as client:
                job_id = (await client.call("cron.add", every(1)))["id"]
                entries = await until_runs(client, job_id, 5)
                await client.call("cron.update", {"id": job_id, "patch": {"enabled": False}})
            async with GatewayClient(b.url, token=b.token) as client:
                seen_by_b = await runs_of(client, job_id)
        slots = [e["slotMs"] for e in entries]
        assert len(slots) == len(set(slots))
        assert set(b - a for a, b in pairwise(slots)) == {1000}
        assert {e["runId"] for e in entries} <= {e["runId"] for e in seen_by_b}
    finally:
        await drop_schema(PG_URL, schema)
