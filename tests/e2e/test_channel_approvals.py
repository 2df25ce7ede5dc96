"""Approvals decided from Discord and Slack, against the real daemon.

A user writes `!tool bash {...}` with a risky command in a chat; the faux model calls `bash`, the
call waits, and the daemon posts a message with Approve and Deny buttons into that conversation.
The stand-ins (`tests/bindings/standins`) deliver the clicks as the platforms do (Discord
`INTERACTION_CREATE` answered through the interaction callback, or the signed Interactions
endpoint; Slack `interactive` envelopes in Socket Mode, or the signed interactivity URL).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from bindings.approvals import NOT_AN_APPROVER
from gateway.client import GatewayClient
from tests.bindings.helpers import wait_until
from tests.bindings.standins.discord import DiscordStandIn
from tests.bindings.standins.discord_interactions import InteractionsClient
from tests.bindings.standins.slack import SlackStandIn
from tests.bindings.standins.slack_events import SlackEventsClient
from tests.daemon import Daemon, start_daemon
from tests.e2e.test_channels import (
    CHANNEL,
    SECRETS,
    SIGNING_SECRET,
    SLACK_CHANNEL,
    channels_ready,
    client_of,
    free_port,
    gatewayd,
    platforms,
)
from tests.reliability._support import tool_message

RISKY = "touch notes.txt && chmod 777 notes.txt && echo changed"
"""Classified medium (world-writable chmod): asks under `risky`, below the deny threshold."""
APPROVER = "77"
SLACK_APPROVER = "UBOSS"
AGENTS = """
[[agents]]
id = "main"
approvals = "risky"
approval_timeout_s = 60

[[agents]]
id = "quick"
approvals = "risky"
approval_timeout_s = 1
"""


def config(discord: DiscordStandIn, slack: SlackStandIn, *, slack_agent: str = "main") -> str:
    return f"""{AGENTS}
[bindings.discord.default]
api_base_url = "{discord.api_base_url}"
group_policy = "open"
require_mention = false
edit_interval_s = 0.2
approvers = ["{APPROVER}"]

[bindings.slack.default]
api_base_url = "{slack.api_base_url}"
group_policy = "open"
require_mention = false
reply_in_thread = true
edit_interval_s = 0.2
default_agent_id = "{slack_agent}"
approvers = ["{SLACK_APPROVER}"]
"""


async def settle(predicate: Any, timeout: float = 20.0) -> None:
    await wait_until(predicate, timeout)


@asynccontextmanager
async def running(home: Path, cfg: str) -> AsyncIterator[tuple[Daemon, GatewayClient]]:
    async with AsyncExitStack() as stack:
        daemon = await stack.enter_async_context(gatewayd(home, cfg))
        client = await stack.enter_async_context(client_of(daemon))
        await channels_ready(client, "discord:default", "slack:default")
        yield daemon, client


def discord_card(discord: DiscordStandIn) -> dict[str, Any] | None:
    """The bot's approval message in the Discord channel, once posted."""
    cards = [
        m
        for m in discord.channels[CHANNEL].messages
        if m["author"]["id"] == discord.bot_user_id and "Approval needed" in m["content"]
    ]
    return cards[-1] if cards else None


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row["components"]]


def slack_card(slack: SlackStandIn, channel: str = SLACK_CHANNEL) -> dict[str, Any] | None:
    cards = [
        m for m in slack.messages.get(channel, []) if m.get("bot_id") == slack.bot_id and m.get("blocks")
    ]
    return cards[-1] if cards else None


def slack_buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in message.get("blocks") or [] if b["type"] == "actions" for e in b["elements"]]


async def pending(client: GatewayClient) -> list[dict[str, Any]]:
    return list((await client.call("exec.approval.list"))["approvals"])


async def only_request(client: GatewayClient) -> dict[str, Any]:
    await settle_async(lambda: pending(client))
    (request,) = await pending(client)
    return request


async def settle_async(check: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def approval(client: GatewayClient, approval_id: str) -> dict[str, Any]:
    return dict((await client.call("exec.approval.get", {"id": approval_id}))["approval"])


async def test_a_discord_approver_approves_with_the_button_and_anyone_else_is_refused_privately(
    gateway_home: Path,
) -> None:
    async with platforms() as (discord, slack), running(gateway_home, config(discord, slack)) as (_, client):
        await discord.dispatch_message(CHANNEL, tool_message("bash", {"command": RISKY}))
        request = await only_request(client)
        await settle(lambda: discord_card(discord) is not None)
        card = discord_card(discord)
        assert card is not None
        assert RISKY in card["content"] and "Approval needed: bash" in card["content"]
        assert "Risk medium; asked because risk medium is at or above ask_threshold medium" in card["content"]
        approve, deny = buttons(card)
        assert (approve["label"], approve["style"], approve["custom_id"]) == (
            "Approve",
            3,
            f"approval:allow-once:{request['id']}",
        )
        assert (deny["label"], deny["style"]) == ("Deny", 4)

        stranger = await discord.click(card["id"], approve["custom_id"], user_id="42")
        await settle(lambda: discord.response_to(stranger) is not None)
        assert discord.response_to(stranger) == {"type": 4, "data": {"content": NOT_AN_APPROVER, "flags": 64}}
        assert discord.ephemerals == [(CHANNEL, "42", NOT_AN_APPROVER)]
        assert (await approval(client, request["id"]))["status"] == "pending"
        assert buttons(discord.messages[card["id"]]), "a refused click leaves the buttons"

        clicked = await discord.click(card["id"], approve["custom_id"], user_id=APPROVER, user_name="boss")
        await settle(lambda: discord.response_to(clicked) is not None)
        assert discord.response_to(clicked) == {"type": 6}
        await settle(lambda: not buttons(discord.messages[card["id"]]))
        shown = discord.messages[card["id"]]["content"]
        assert shown.startswith(f"**Approved by {APPROVER} via discord** (bash)") and RISKY in shown, shown
        decided = await approval(client, request["id"])
        assert decided["status"] == "allowed" and decided["decision"] == "allow-once"
        assert decided["decidedBy"] == APPROVER and decided["surface"] == "discord"
        assert decided["resolver"] == {"kind": "channel", "id": APPROVER}
        await settle(lambda: any("changed" in t for t in discord.channel_texts(CHANNEL) if t != shown))


async def test_a_slack_approver_approves_with_the_button_and_anyone_else_is_refused_privately(
    gateway_home: Path,
) -> None:
    async with platforms() as (discord, slack), running(gateway_home, config(discord, slack)) as (_, client):
        asked = slack.message_event(SLACK_CHANNEL, tool_message("bash", {"command": RISKY}), user="U1")
        await slack.send_event(asked)
        request = await only_request(client)
        await settle(lambda: slack_card(slack) is not None)
        card = slack_card(slack)
        assert card is not None
        assert card["thread_ts"] == asked["ts"], "the card goes where the reply goes: the thread"
        assert "Approval needed: bash" in card["text"] and "chmod 777" in card["text"]
        approve, deny = slack_buttons(card)
        assert (approve["text"]["text"], approve["style"], approve["action_id"]) == (
            "Approve",
            "primary",
            f"approval:allow-once:{request['id']}",
        )
        assert (deny["text"]["text"], deny["style"]) == ("Deny", "danger")

        envelope = await slack.click(SLACK_CHANNEL, card["ts"], approve["action_id"], user="U1")
        await settle(lambda: slack.ephemerals)
        assert slack.envelopes[envelope]["acked_at"] is not None
        assert slack.ephemerals == [
            {"channel": SLACK_CHANNEL, "user": "U1", "text": NOT_AN_APPROVER, "thread_ts": asked["ts"]}
        ]
        assert (await approval(client, request["id"]))["status"] == "pending"
        assert slack_buttons(card), "a refused click leaves the buttons"

        await slack.click(SLACK_CHANNEL, card["ts"], approve["action_id"], user=SLACK_APPROVER)
        await settle(lambda: not slack_buttons(card))
        assert card["text"].startswith(f"*Approved by {SLACK_APPROVER} via slack* (bash)"), card["text"]
        decided = await approval(client, request["id"])
        assert decided["decidedBy"] == SLACK_APPROVER and decided["surface"] == "slack"
        assert decided["status"] == "allowed"
        await settle(
            lambda: any(
                "changed" in t for t in slack.bot_texts(SLACK_CHANNEL, asked["ts"]) if t != card["text"]
            )
        )


CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]


async def gatewayctl(daemon: Daemon, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(PYTHONUNBUFFERED="1", GATEWAY_URL=daemon.url, GATEWAY_TOKEN=daemon.token)
    proc = await asyncio.create_subprocess_exec(
        *CTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_chat_message_shows_a_decision_made_elsewhere_or_a_timeout(gateway_home: Path) -> None:
    """gatewayctl denies the Discord request; the Slack one (agent `quick`, 1 s) expires; both
    messages are edited to say so and lose their buttons."""
    async with (
        platforms() as (discord, slack),
        running(gateway_home, config(discord, slack, slack_agent="quick")) as (daemon, client),
    ):
        await discord.dispatch_message(CHANNEL, tool_message("bash", {"command": RISKY}))
        request = await only_request(client)
        await settle(lambda: discord_card(discord) is not None)
        card = discord_card(discord)
        assert card is not None and buttons(card)
        rc, _, err = await gatewayctl(daemon, "approvals", "deny", request["id"], "--reason", "use 644")
        assert rc == 0, err
        await settle(lambda: not buttons(discord.messages[card["id"]]))
        shown = discord.messages[card["id"]]["content"]
        assert shown.startswith("**Denied by operator via gatewayctl: use 644** (bash)"), shown

        asked = slack.message_event(SLACK_CHANNEL, tool_message("bash", {"command": RISKY}), user="U1")
        await slack.send_event(asked)
        await settle(lambda: slack_card(slack) is not None)
        slack_message = slack_card(slack)
        assert slack_message is not None
        await settle(lambda: not slack_buttons(slack_message))
        assert slack_message["text"].startswith("*Expired: No one decided within 1 s.* (bash)"), (
            slack_message["text"]
        )


async def test_clicks_on_the_signed_http_endpoints_decide_too(gateway_home: Path) -> None:
    """Discord in `interactions` mode (a slash command starts the session; the click is answered
    in the HTTP response) and Slack in `events` mode (the click comes to the interactivity URL)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/bindings"
    async with platforms() as (discord, slack), httpx.AsyncClient() as http:
        interactions = InteractionsClient(http, f"{base}/discord/slash/interactions")
        cfg = f"""{AGENTS}
[bindings.slack.hooks]
mode = "events"
api_base_url = "{slack.api_base_url}"
group_policy = "open"
require_mention = false
approvers = ["{SLACK_APPROVER}"]

[bindings.discord.slash]
mode = "interactions"
api_base_url = "{discord.api_base_url}"
public_key_env = "DISCORD_TEST_PUBLIC_KEY"
group_policy = "open"
approvers = ["{APPROVER}"]
"""
        env = {**SECRETS, "DISCORD_TEST_PUBLIC_KEY": interactions.public_key_hex}
        daemon = await asyncio.to_thread(start_daemon, gateway_home, config=cfg, env=env, port=port)
        try:
            async with client_of(daemon) as client:
                await channels_ready(client, "slack:hooks", "discord:slash")
                started = await interactions.command(
                    "ask", [{"name": "text", "type": 3, "value": tool_message("bash", {"command": RISKY})}],
                    channel_id=CHANNEL, guild_id="900",
                )  # fmt: skip
                assert started.status_code == 200, started.text
                request = await only_request(client)
                await settle(lambda: discord_card(discord) is not None)
                card = discord_card(discord)
                assert card is not None
                _, deny = buttons(card)
                refused = await interactions.post(
                    discord.component_interaction(card["id"], deny["custom_id"], user_id="42")
                )
                assert refused.json() == {"type": 4, "data": {"content": NOT_AN_APPROVER, "flags": 64}}
                forged = await interactions.post(
                    discord.component_interaction(card["id"], deny["custom_id"], user_id=APPROVER),
                    other_key=True,
                )
                assert forged.status_code == 401
                assert (await approval(client, request["id"]))["status"] == "pending"
                denied = await interactions.post(
                    discord.component_interaction(card["id"], deny["custom_id"], user_id=APPROVER)
                )
                assert denied.json() == {"type": 6}
                await settle(lambda: not buttons(discord.messages[card["id"]]))
                decided = await approval(client, request["id"])
                assert decided["status"] == "denied" and decided["decidedBy"] == APPROVER
                assert decided["surface"] == "discord"

                events = SlackEventsClient(http, f"{base}/slack/hooks/events", SIGNING_SECRET)
                asked = slack.message_event("C9", tool_message("bash", {"command": RISKY}))
                assert (await events.send(slack.callback(asked))).status_code == 200
                second = await only_request(client)
                await settle(lambda: slack_card(slack, "C9") is not None)
                slack_message = slack_card(slack, "C9")
                assert slack_message is not None
                approve_action = slack_buttons(slack_message)[0]["action_id"]
                url = f"{base}/slack/hooks/interactivity"
                clicked = slack.block_actions("C9", slack_message["ts"], approve_action, user=SLACK_APPROVER)
                assert (await events.interactive(url, clicked, forge=True)).status_code == 401
                assert (await approval(client, second["id"]))["status"] == "pending"
                assert (await events.interactive(url, clicked)).status_code == 200
                await settle(lambda: not slack_buttons(slack_message))
                assert slack_message["text"].startswith(f"*Approved by {SLACK_APPROVER} via slack*")
        finally:
            await asyncio.to_thread(daemon.stop)


async def test_a_click_after_a_crash_shows_that_the_request_was_cancelled(gateway_home: Path) -> None:
    """The daemon is killed while a request waits; the next start cancels it. The message still
    has its buttons (nobody edited it); an approver's click edits it to say what happened and
    decides nothing."""
    async with platforms() as (discord, slack):
        cfg = config(discord, slack)
        env = {**SECRETS, "GATEWAY_FAUX_PACE_MS": "5"}
        first = await asyncio.to_thread(start_daemon, gateway_home, config=cfg, env=env)
        try:
            async with client_of(first) as client:
                await channels_ready(client, "discord:default", "slack:default")
                await discord.dispatch_message(CHANNEL, tool_message("bash", {"command": RISKY}))
                request = await only_request(client)
                await settle(lambda: discord_card(discord) is not None)
        finally:
            await asyncio.to_thread(first.kill)
        card = discord_card(discord)
        assert card is not None
        approve, _ = buttons(card)
        async with gatewayd(gateway_home, cfg) as second, client_of(second) as client:
            await channels_ready(client, "discord:default", "slack:default")
            clicked = await discord.click(card["id"], approve["custom_id"], user_id=APPROVER)
            await settle(lambda: discord.response_to(clicked) is not None)
            answer = discord.response_to(clicked)
            assert answer is not None and answer["type"] == 7 and answer["data"]["components"] == []
            shown = discord.messages[card["id"]]["content"]
            assert shown.startswith("**Cancelled: The gateway restarted while this request waited;"), shown
            assert not buttons(discord.messages[card["id"]])
            after = await approval(client, request["id"])
            assert after["status"] == "cancelled" and after["reason"] == "gateway-restart"
    assert not (gateway_home / "workspaces" / "main" / "notes.txt").exists()
