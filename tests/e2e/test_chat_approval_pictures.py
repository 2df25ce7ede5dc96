"""Pictures of the approval message as Discord and Slack receive it, drawn from the payload.

The real daemon posts its approval request to the Discord and Slack stand-ins; an approver
decides with a button and the daemon edits the message. Each stored message (as posted, and as
edited) is laid out by `tests.e2e.chat_render` and drawn in headless Chromium. Set
GATEWAY_CHAT_APPROVAL_SCREENSHOTS=docs/images to refresh the pictures in the docs
(`approval-discord.png`, `approval-slack.png` and their `-decided` versions).
"""

from __future__ import annotations

import copy
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright, expect

from tests.e2e.chat_render import discord_page, slack_page
from tests.e2e.test_channel_approvals import (
    APPROVER,
    RISKY,
    SLACK_APPROVER,
    buttons,
    config,
    discord_card,
    only_request,
    running,
    settle,
    slack_buttons,
    slack_card,
)
from tests.e2e.test_channels import CHANNEL, SLACK_CHANNEL, platforms
from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, _require_chromium
from tests.reliability._support import tool_message

WHY = "Risk medium; asked because risk medium is at or above ask_threshold medium."
GREEN, RED = "rgb(36, 128, 70)", "rgb(218, 55, 60)"
"""Discord's success (3) and danger (4) button colours."""
SLACK_GREEN, SLACK_RED = "rgb(0, 122, 90)", "rgb(224, 30, 90)"
"""Slack's primary and danger button colours."""


def test_an_element_the_renderer_does_not_know_is_shown_as_a_note() -> None:
    message = {
        "author": {"id": "1", "username": "bot", "bot": True},
        "content": "<b>not markup</b> **bold**",
        "components": [{"type": 1, "components": [{"type": 3, "custom_id": "pick", "options": []}]}],
        "poll": {"question": {"text": "lunch?"}},
    }
    page = discord_page(message)
    assert "&lt;b&gt;not markup&lt;/b&gt; <strong>bold</strong>" in page
    assert "[not drawn: component type 3 string select]" in page
    assert "[not drawn: message field poll]" in page
    blocks = [{"type": "section", "text": {"type": "plain_text", "text": "hi"}}, {"type": "video"}]
    slack = slack_page({"bot_id": "B1", "ts": "1700000000.000001", "text": "fallback", "blocks": blocks})
    assert "[not drawn: block type video]" in slack and "fallback" not in slack


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_the_approval_messages_are_drawn_from_what_the_daemon_posted(
    gateway_home: Path, tmp_path: Path
) -> None:
    """The request with its two buttons, then the edited message that says who decided, on both
    platforms; every check reads the page drawn from the stored payload."""
    _require_chromium()
    async with platforms() as (discord, slack), running(gateway_home, config(discord, slack)) as (_, client):
        await discord.dispatch_message(CHANNEL, tool_message("bash", {"command": RISKY}))
        await only_request(client)
        await settle(lambda: discord_card(discord) is not None)
        card = discord_card(discord)
        assert card is not None
        discord_posted = copy.deepcopy(card)
        approve, _ = buttons(card)
        await discord.click(card["id"], approve["custom_id"], user_id=APPROVER, user_name="boss")
        await settle(lambda: not buttons(discord.messages[card["id"]]))
        discord_decided = copy.deepcopy(discord.messages[card["id"]])
        assert any(edit.message_id == card["id"] for edit in discord.edits)

        asked = slack.message_event(SLACK_CHANNEL, tool_message("bash", {"command": RISKY}), user="U1")
        await slack.send_event(asked)
        await only_request(client)
        await settle(lambda: slack_card(slack) is not None)
        message = slack_card(slack)
        assert message is not None
        slack_posted = copy.deepcopy(message)
        _, deny = slack_buttons(message)
        await slack.click(SLACK_CHANNEL, message["ts"], deny["action_id"], user=SLACK_APPROVER)
        await settle(lambda: not slack_buttons(message))
        slack_decided = copy.deepcopy(message)
        assert any(update.ts == message["ts"] for update in slack.updates)

    folder = Path(os.environ.get("GATEWAY_CHAT_APPROVAL_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    async with chromium_page() as page:
        await page.set_content(discord_page(discord_posted))
        await shows_the_request(page)
        await expect(page.locator(".header .name")).to_have_text("bot")
        await shows_buttons(page, [("Approve", GREEN), ("Deny", RED)])
        await snap(page, folder / "approval-discord.png")

        await page.set_content(discord_page(discord_decided, edited=True))
        await shows_the_decision(page, f"Approved by {APPROVER} via discord")
        await snap(page, folder / "approval-discord-decided.png")

        await page.set_content(slack_page(slack_posted))
        await shows_the_request(page)
        await expect(page.locator(".thread-head")).to_have_text("Thread")
        await shows_buttons(page, [("Approve", SLACK_GREEN), ("Deny", SLACK_RED)])
        await snap(page, folder / "approval-slack.png")

        await page.set_content(slack_page(slack_decided, edited=True))
        await shows_the_decision(page, f"Denied by {SLACK_APPROVER} via slack")
        await snap(page, folder / "approval-slack-decided.png")


@asynccontextmanager
async def chromium_page() -> AsyncIterator[Page]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 640, "height": 400})
            yield await context.new_page()
        finally:
            await browser.close()


async def shows_the_request(page: Page) -> None:
    await expect(page.locator(".unrendered")).to_have_count(0)
    await expect(page.locator(".markup strong").first).to_have_text("Approval needed: bash")
    await expect(page.locator("pre.codeblock")).to_have_text(RISKY)
    await expect(page.locator(".markup")).to_contain_text(WHY)
    await expect(page.locator(".edited")).to_have_count(0)


async def shows_the_decision(page: Page, headline: str) -> None:
    await expect(page.locator(".unrendered")).to_have_count(0)
    await expect(page.locator(".markup strong").first).to_have_text(headline)
    await expect(page.locator("pre.codeblock")).to_have_text(RISKY)
    await expect(page.locator(".button")).to_have_count(0)
    await expect(page.locator(".edited")).to_have_text("(edited)")


async def shows_buttons(page: Page, expected: list[tuple[str, str]]) -> None:
    """The buttons, in order, with their labels and the background their style gives them."""
    shown = page.locator(".row .button")
    await expect(shown).to_have_text([label for label, _ in expected])
    colours = [await b.evaluate("b => getComputedStyle(b).backgroundColor") for b in await shown.all()]
    assert colours == [colour for _, colour in expected]


async def snap(page: Page, path: Path) -> None:
    await page.locator(".frame").screenshot(path=str(path))
