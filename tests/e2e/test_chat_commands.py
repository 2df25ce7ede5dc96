"""Chat commands end to end: the real `gatewayd` (faux/echo) answering `/status`, `/model`,
`/think`, `/stop`, `/compact`, `/new` and `/reset` typed into `gatewayctl sessions send` (a
subprocess, running the example of docs/extensions.md), sent as a raw WebSocket `chat.send` (as
OpenClaw clients send them), and written in a stand-in Discord channel, where a sender the
channel's access rules refuse cannot run them."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gateway.client import GatewayClient
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import Raw, open_raw
from tests.e2e.test_channels import (
    CHANNEL,
    DM,
    bindings_toml,
    bot_messages,
    channels_ready,
    client_of,
    gatewayd,
    platforms,
    settle,
)
from tests.gateway.commands.test_registry import COMMAND_ENTRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "extensions.md"
CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]
SCRUBBED = (
    "GATEWAY_URL",
    "GATEWAY_TOKEN",
    "GATEWAY_PASSWORD",
    "GATEWAY_CONFIG",
    "GATEWAY_HOST",
    "GATEWAY_PORT",
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("chat-commands")
    with pytest.MonkeyPatch.context() as patch:
        for name in (*SCRUBBED, "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            patch.delenv(name, raising=False)
        # A template and a skill for the dashboard's completion.
        prompts, skill = home / "state" / "prompts", home / "state" / "skills" / "deploy"
        prompts.mkdir(parents=True)
        skill.mkdir(parents=True)
        (prompts / "review.md").write_text("---\ndescription: Review a file\n---\nReview $1.\n")
        (skill / "SKILL.md").write_text("---\ndescription: Deploy the app\n---\nRun make deploy.\n")
        running = start_daemon(home / "state", env={"HOME": str(home / "user")})
    try:
        yield running
    finally:
        running.stop()


# --- gatewayctl ------------------------------------------------------------------------------


def ctl_env(daemon: Daemon) -> dict[str, str]:
    env = {k: v for k, v in daemon.env.items() if k not in SCRUBBED}
    return {**env, "GATEWAY_URL": daemon.url, "GATEWAY_TOKEN": daemon.token, "PYTHONUNBUFFERED": "1"}


def gatewayctl(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*CTL, *args], capture_output=True, text=True, env=ctl_env(daemon), timeout=60, check=False
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def doc_session() -> list[tuple[list[str], list[str]]]:
    """The docs' `gatewayctl` example: each command line's arguments and the output lines shown."""
    block = DOC.read_text().split("<!-- example: gatewayctl -->\n```console\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ gatewayctl "):
            steps.append((shlex.split(line.removeprefix("$ gatewayctl ")), []))
        else:
            steps[-1][1].append(line)
    return steps


def test_the_docs_gatewayctl_session(daemon: Daemon) -> None:
    steps = doc_session()
    assert len(steps) >= 8
    for args, shown in steps:
        run = gatewayctl(daemon, *args)
        assert run.returncode == 0, (args, run.stderr)
        expected = "\n".join(re.escape(line).replace("…", ".*") for line in shown)
        assert re.fullmatch(expected, run.stdout.rstrip("\n")), (args, run.stdout)


async def test_stop_from_gatewayctl_stops_a_run_in_progress(daemon: Daemon) -> None:
    key = "agent:main:ctl-stop"
    waiting = await asyncio.create_subprocess_exec(
        *CTL, "sessions", "send", key, "!sleep 30000 too late", env=ctl_env(daemon),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        await until_running(client, key)
    stop = await asyncio.to_thread(gatewayctl, daemon, "sessions", "send", key, "/stop")
    assert (stop.returncode, stop.stdout) == (0, "Stopped the run.\n")
    _, err = await asyncio.wait_for(waiting.communicate(), 30)
    assert waiting.returncode != 0 and "aborted" in err.decode()


async def until_running(client: GatewayClient, key: str) -> None:
    for _ in range(400):
        rows = (await client.call("sessions.list", {"search": key}))["sessions"]
        if any(r["key"] == key and r["hasActiveRun"] for r in rows):
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{key} never started running")


# --- a raw WebSocket, as OpenClaw clients send -------------------------------------------------


class Conn:
    """A raw connection that keeps the events it reads while waiting for an answer."""

    def __init__(self, raw: Raw) -> None:
        self.raw = raw
        self.events: list[dict[str, Any]] = []
        self.ids = 0

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        rid = f"c{self.ids}"
        await self.raw.send({"type": "req", "id": rid, "method": method, "params": params})
        while True:
            frame = await self.raw.recv(timeout=20)
            if frame.get("type") == "res" and frame.get("id") == rid:
                return frame
            self.events.append(frame)

    async def chat_end(self, run_id: str) -> dict[str, Any]:
        """The `chat` event that ends run `run_id` (final, aborted or error)."""

        def ends(frame: dict[str, Any]) -> bool:
            payload = frame.get("payload") or {}
            return (
                frame.get("event") == "chat"
                and payload.get("runId") == run_id
                and payload["state"] != "delta"
            )

        while True:
            found = next((f for f in self.events if ends(f)), None)
            if found is not None:
                return dict(found["payload"])
            self.events.append(await self.raw.recv(timeout=20))

    async def command(self, key: str, text: str, run_id: str) -> str:
        sent = await self.request("chat.send", {"sessionKey": key, "message": text, "idempotencyKey": run_id})
        assert sent["ok"] and sent["payload"] == {"runId": run_id, "status": "started"}, sent
        final = await self.chat_end(run_id)
        assert final["state"] == "final" and final["sessionKey"] == key, final
        return "".join(block["text"] for block in final["message"]["content"])

    async def row(self, key: str) -> dict[str, Any]:
        answer = await self.request("sessions.list", {"search": key, "limit": 5})
        return next(r for r in answer["payload"]["sessions"] if r["key"] == key)


async def test_each_command_over_chat_send(daemon: Daemon) -> None:
    key = "agent:main:raw"
    raw = await open_raw(daemon)
    conn = Conn(raw)
    try:
        status = await conn.command(key, "/status", "raw-status")
        assert status.startswith(f"Session {key} (") and "model faux/echo" in status

        assert await conn.command(key, "/think high", "raw-think") == "Thinking level set to high."
        model = await conn.command(key, "/model openai/gpt-4o-mini", "raw-model")
        assert model == "Model set to openai/gpt-4o-mini."
        listed = await conn.row(key)
        assert (listed["thinkingLevel"], listed["model"]) == ("high", "openai/gpt-4o-mini")
        await conn.command(key, "/model faux/echo", "raw-model-back")

        long = await conn.request(
            "chat.send", {"sessionKey": key, "message": "!sleep 30000 late", "idempotencyKey": "raw-long"}
        )
        assert long["ok"]
        while not (await conn.row(key))["hasActiveRun"]:
            await asyncio.sleep(0.02)
        assert await conn.command(key, "/stop", "raw-stop") == "Stopped the run."
        assert (await conn.chat_end("raw-long"))["state"] == "aborted"

        compacted = await conn.command(key, "/compact", "raw-compact")
        assert compacted.startswith(("Compacted:", "Nothing was compacted:"))
        before = (await conn.row(key))["sessionId"]
        started = await conn.command(key, "/reset", "raw-reset")
        assert started.startswith(f"Started a new session for {key}.")
        after = await conn.row(key)
        assert after["sessionId"] != before and after["thinkingLevel"] == "high"  # settings carry over
        await conn.command(key, "/new", "raw-new")
        assert (await conn.row(key))["sessionId"] != after["sessionId"]

        repeated = await conn.request(
            "chat.send", {"sessionKey": key, "message": "/new", "idempotencyKey": "raw-new"}
        )
        assert repeated["payload"]["status"] == "ok"  # answered once, never rotated twice
        accepted = await conn.request(
            "agent", {"sessionKey": key, "message": "/status", "idempotencyKey": "raw-agent"}
        )
        assert accepted["payload"]["status"] == "accepted"
        final = await raw.recv(timeout=20)
        while not (final.get("type") == "res" and final.get("id") == accepted["id"]):
            final = await raw.recv(timeout=20)
        assert final["payload"]["status"] == "ok"
        assert final["payload"]["result"]["payloads"][0]["text"].startswith(f"Session {key} (")
    finally:
        await raw.aclose()


async def test_commands_list_answers_the_openclaw_tui_call(daemon: Daemon) -> None:
    raw = await open_raw(daemon)
    try:
        answer = await raw.request(
            "commands.list", {"agentId": "main", "scope": "text", "includeArgs": False}
        )
    finally:
        await raw.aclose()
    assert answer["ok"], answer
    commands = answer["payload"]["commands"]
    for entry in commands:
        jsonschema.validate(entry, COMMAND_ENTRY)
    assert {"stop", "new", "reset", "compact", "model", "think", "status"} <= {c["name"] for c in commands}
    assert all("args" not in c for c in commands)


# --- a chat channel --------------------------------------------------------------------------

ALLOWED = "42"
ACCESS = 'dm_policy = "allowlist"\nallow_from = ["42"]\n'


async def test_each_command_from_discord_and_none_from_a_refused_sender(gateway_home: Path) -> None:
    key = f"agent:main:discord:channel:{CHANNEL}"
    async with platforms() as (discord, _):
        config = bindings_toml(discord, None).replace(
            "require_mention = false\n", "require_mention = false\n" + ACCESS
        )
        async with gatewayd(gateway_home, config) as daemon, client_of(daemon) as client:
            await channels_ready(client, "discord:default")

            async def say(text: str, answered: str | tuple[str, ...]) -> str:
                """Write `text` as the allowed user; the bot's new message that starts with
                `answered`, once it is there."""
                count = len(bot_messages(discord, CHANNEL))
                await discord.dispatch_message(CHANNEL, text, author_id=ALLOWED)

                def reply() -> str | None:
                    new = [str(m["content"]) for m in bot_messages(discord, CHANNEL)[count:]]
                    return next((t for t in new if t.startswith(answered)), None)

                await settle(reply)
                return reply() or ""

            assert "model faux/echo" in await say("/status", f"Session {key} (")
            assert await say("/think: low", "Thinking") == "Thinking level set to low."
            assert await say("/model openai/gpt-4o-mini", "Model") == "Model set to openai/gpt-4o-mini."
            described = await client.call("sessions.describe", {"key": key})
            assert (described["thinkingLevel"], described["model"]) == ("low", "openai/gpt-4o-mini")
            await say("/model faux/echo", "Model set")

            await discord.dispatch_message(CHANNEL, "!sleep 30000 too late", author_id=ALLOWED)
            await until_running(client, key)
            assert await say("/stop", "Stopped") == "Stopped the run."
            for _ in range(400):
                if not (await client.call("sessions.describe", {"key": key}))["hasActiveRun"]:
                    break
                await asyncio.sleep(0.025)
            assert not (await client.call("sessions.describe", {"key": key}))["hasActiveRun"]

            await say("/compact", ("Compacted:", "Nothing was compacted:"))
            before = (await client.call("sessions.describe", {"key": key}))["sessionId"]
            await say("/new", f"Started a new session for {key}.")
            after = (await client.call("sessions.describe", {"key": key}))["sessionId"]
            assert after != before
            await say("/reset", f"Started a new session for {key}.")
            assert (await client.call("sessions.describe", {"key": key}))["sessionId"] != after

            # A DM from someone the allowlist does not name: no command runs, nothing answers.
            total = (await client.call("sessions.list", {"includeArchived": True}))["totalCount"]
            for text in ("/new", "/status", "/think high"):
                await discord.dispatch_message(DM, text, author_id="77", author_name="mallory")
            await discord.dispatch_message(DM, "/status", author_id=ALLOWED)
            await settle(lambda: bot_messages(discord, DM))
            await asyncio.sleep(0.5)
            [answer] = bot_messages(discord, DM)  # the allowed sender's, alone
            assert answer["content"].startswith("Session agent:main:main (")
            assert (await client.call("sessions.list", {"includeArchived": True}))["totalCount"] == total + 1
            main = await client.call("sessions.describe", {"key": "agent:main:main"})
            assert main["thinkingLevel"] is None


# --- the dashboard -----------------------------------------------------------------------------


@pytest.mark.browser
async def test_the_dashboard_completes_commands_after_a_slash(daemon: Daemon) -> None:
    from playwright.async_api import async_playwright, expect

    from tests.e2e.test_dashboard import (
        ASSISTANT_DONE,
        CHROMIUM,
        CHROMIUM_ARGS,
        Dashboard,
        _require_chromium,
        final_reply,
    )

    _require_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 860})
        try:
            page = await context.new_page()
            dash = Dashboard(daemon, context, page, "", "agent:main:completion")
            dash.watch(page)
            await dash.sign_in()
            await dash.open_session()
            box = page.locator("#composer-input")
            listed = page.locator("#command-completions li")

            await box.press_sequentially("/re")
            await expect(listed).to_have_count(2)
            await expect(listed.nth(0)).to_contain_text("/reset")
            await expect(listed.nth(1)).to_contain_text("/review")
            await expect(listed.nth(1)).to_contain_text("Review a file")  # the template's description
            await box.press("ArrowDown")
            await expect(listed.nth(1)).to_have_attribute("aria-selected", "true")
            await box.press("Enter")  # takes the choice, sends nothing
            await expect(box).to_have_value("/review ")
            await expect(page.locator("#command-completions")).to_be_hidden()

            await box.fill("")
            await box.press_sequentially("/skill:")
            await expect(listed).to_have_count(1)
            await box.press("Tab")
            await expect(box).to_have_value("/skill:deploy ")

            await box.fill("")
            await box.press_sequentially("/sta")
            await expect(listed).to_have_count(1)
            await box.press("Escape")
            await expect(page.locator("#command-completions")).to_be_hidden()
            await expect(box).to_have_value("/sta")
            await box.press_sequentially("t")
            await expect(listed).to_have_count(1)
            await box.press("Enter")  # the list shows /status: Enter takes it
            await expect(box).to_have_value("/status")
            await expect(page.locator("#command-completions")).to_be_hidden()
            await box.press("Enter")  # the list is closed: Enter sends
            assert (await final_reply(page)).startswith("Session agent:main:completion (")
            # The command and its answer are not in the transcript: nothing branches from them.
            branch = page.locator("article.msg .msg-action", has_text="Branch here")
            await expect(branch).to_have_count(0)
            await dash.send("hello")  # a message the model answers: it and its reply are stored
            await expect(page.locator(ASSISTANT_DONE)).to_have_count(2)
            await expect(branch).to_have_count(2)
            await box.press_sequentially("/stop")
            await expect(listed).to_have_count(1)
            await box.press("Enter")  # typed out already: Enter sends it
            await expect(page.locator(ASSISTANT_DONE)).to_have_count(3)
            await expect(page.locator(ASSISTANT_DONE).last).to_contain_text("Nothing is running.")

            # `/new` moves the key to a new session; the reply is in this one, which keeps no key.
            await dash.send("/new")
            await expect(page.locator(ASSISTANT_DONE)).to_have_count(4)
            await expect(page.locator(ASSISTANT_DONE).last).to_contain_text(
                "Started a new session for agent:main:completion."
            )
            await expect(box).to_be_disabled()
            await expect(page.locator('li.tree-item[data-key="agent:main:completion"]')).to_have_count(1)
            assert dash.page_errors == []
        finally:
            await context.close()
            await browser.close()
