"""The web dashboard (gateway/ui/) in a real headless Chromium against the real daemon.

Covers what an operator does and sees: signing in with the token, a reply streaming in, tool calls
and thinking, branching at a message, switching a key, compacting and resetting, stopping a run,
and the resume rule — a dropped connection, a reload, a new tab in the middle of a reply and a
pruned event log all end with the transcript complete and nothing shown twice.

The browser may only talk to the daemon: every other request is refused and fails the test, and
so does any uncaught error in the page. Set GATEWAY_DASHBOARD_SCREENSHOT=docs/dashboard.png to
refresh the screenshots in docs/: the main view at 1280 by 800 there, and a phone (390 by 844) beside
it as dashboard-phone.png.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from gateway.client import GatewayClient
from sessions.store import Store
from tests.daemon import Daemon, start_daemon

# One daemon and one browser for the module (starting them is most of the cost); each test gets a
# fresh browser context (nothing stored) and sessions of its own.
pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(90)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STREAMING = "#messages article.streaming[data-role=assistant]"
ASSISTANT_DONE = "#messages article[data-role=assistant]:not(.streaming)"

expect.set_options(timeout=15_000)


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is not installed (apt-get install chromium); the dashboard tests need it"
    if os.environ.get("GATEWAY_TEST_REQUIRE_BROWSER") == "1":
        pytest.fail(f"GATEWAY_TEST_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def screenshot_path(tmp_path: Path, variant: str = "") -> Path:
    """Where a screenshot goes: beside GATEWAY_DASHBOARD_SCREENSHOT (`dashboard.png`,
    `dashboard-phone.png`) when it is set, else into the test's temporary directory."""
    main = Path(os.environ.get("GATEWAY_DASHBOARD_SCREENSHOT") or tmp_path / "dashboard.png")
    return main.with_name(f"{main.stem}-{variant}{main.suffix}") if variant else main


def long_text(words: int) -> str:
    """What faux/echo streams for `!long N`."""
    return " ".join(f"w{i}" for i in range(1, words + 1))


@dataclass
class Stack:
    daemon: Daemon
    browser: Browser
    database_url: str


@dataclass
class Dashboard:
    daemon: Daemon
    context: BrowserContext
    page: Page
    database_url: str
    key: str
    outside_requests: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        """Record uncaught errors and refused loads (Content-Security-Policy) of `page`."""
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        page.on(
            "console",
            lambda message: (
                self.page_errors.append(message.text)
                if message.type == "error" and "Content Security Policy" in message.text
                else None
            ),
        )

    @property
    def url(self) -> str:
        return f"{self.daemon.http_url}/ui/"

    async def new_page(self) -> Page:
        page = await self.context.new_page()
        self.watch(page)
        return page

    async def sign_in(self, page: Page | None = None) -> None:
        page = page or self.page
        await page.goto(self.url)
        await expect(page.locator("#auth-dialog")).to_be_visible()
        await page.fill("#auth-secret", self.daemon.token)
        await page.click("#auth-submit")
        await connected(page)

    async def open_session(self, label: str = "") -> None:
        """Create this test's session through the dashboard's own dialog; wait until it is live."""
        page = self.page
        await page.click("#new-session")
        await page.fill("#prompt-fields input[name=key]", self.key)
        await page.fill("#prompt-fields input[name=label]", label)
        await page.click("#prompt-ok")
        await expect(page.locator("#session-key")).to_have_text(self.key)
        await expect(self.tree_item()).to_be_visible()
        await live(page)

    def tree_item(self, page: Page | None = None) -> Any:
        return (page or self.page).locator(f'li.tree-item[data-key="{self.key}"]')

    async def send(self, text: str, page: Page | None = None) -> None:
        page = page or self.page
        await page.fill("#composer-input", text)
        await page.press("#composer-input", "Enter")

    def client(self) -> GatewayClient:
        return GatewayClient(self.daemon.url, token=self.daemon.token)

    async def history(self, key: str | None = None) -> list[dict[str, Any]]:
        async with self.client() as client:
            answer = await client.call("chat.history", {"sessionKey": key or self.key})
        messages: list[dict[str, Any]] = answer["messages"]
        return messages


async def connected(page: Page) -> None:
    await expect(page.locator("body")).to_have_attribute("data-connection", "ready")


async def live(page: Page) -> None:
    """Connected, and the shown session's feed is subscribed (its replay answered)."""
    await connected(page)
    await expect(page.locator("#session")).to_have_attribute("data-feed", "live")


async def streamed_words(page: Page, at_least: int) -> str:
    """Wait until the streaming reply holds at least `at_least` words; return its text then."""
    handle = await page.wait_for_function(
        """([selector, count]) => {
            const node = document.querySelector(selector + " .msg-text");
            const text = node ? node.textContent : "";
            return text.trim().split(/\\s+/).length >= count ? text : null;
        }""",
        arg=[STREAMING, at_least],
        polling="raf",
    )
    text = await handle.json_value()
    assert isinstance(text, str)
    return text


async def final_reply(page: Page) -> str:
    """The text of the last completed assistant message, once nothing is streaming."""
    await expect(page.locator(STREAMING)).to_have_count(0)
    reply = page.locator(ASSISTANT_DONE).last
    await expect(reply).to_be_visible()
    text = await reply.locator(".msg-text").text_content()
    return text or ""


def text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content", []) if b.get("type") == "text")


def assistant_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [text_of(m) for m in messages if m["role"] == "assistant"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    _require_chromium()
    home = tmp_path_factory.mktemp("dashboard-gateway")
    database_url = f"sqlite+aiosqlite:///{home / 'gateway.db'}"
    env = {
        "GATEWAY_FAUX_PACE_MS": "20",
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_CONFIG": "",
        "HOME": str(home / "user"),
    }
    daemon = start_daemon(home, env=env)
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                yield Stack(daemon, browser, database_url)
            finally:
                await browser.close()
    finally:
        daemon.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def dashboard(stack: Stack, request: pytest.FixtureRequest) -> AsyncIterator[Dashboard]:
    context = await stack.browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        origin = urlsplit(stack.daemon.http_url).netloc
        outside: list[str] = []

        async def only_the_daemon(route: Any) -> None:
            if urlsplit(route.request.url).netloc == origin:
                await route.continue_()
            else:
                outside.append(route.request.url)
                await route.abort()

        await context.route("**/*", only_the_daemon)
        page = await context.new_page()
        key = "agent:main:" + request.node.name.removeprefix("test_")[:48]
        dash = Dashboard(stack.daemon, context, page, stack.database_url, key, outside_requests=outside)
        dash.watch(page)
        yield dash
        assert dash.outside_requests == [], "the page reached beyond the daemon"
        assert dash.page_errors == [], "uncaught errors in the page"
    finally:
        await context.close()


async def test_tool_calls_thinking_and_the_main_view(dashboard: Dashboard, tmp_path: Path) -> None:
    page = dashboard.page
    dashboard.key = "agent:main:main"
    await dashboard.sign_in()
    await dashboard.open_session(label="Release checklist")
    # A sub-agent (spawned by the session's own tool call) and a branch for the tree.
    await dashboard.send('!tool session_spawn {"prompt":"List the open questions","label":"research helper"}')
    await expect(dashboard.tree_item().locator("li.tree-item[data-kind=subagent]")).to_have_count(1)
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(2)
    async with dashboard.client() as client:
        history = await client.call("chat.history", {"sessionKey": dashboard.key})
        first = history["messages"][0]["__gateway"]["id"]
        await client.call(
            "sessions.branch", {"key": dashboard.key, "fromEntryId": first, "label": "try another way"}
        )
    await expect(dashboard.tree_item().locator("li.tree-item[data-kind=branch]")).to_have_count(1)

    await dashboard.send("!think Start with the state of the workspace, then run the checks.")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(3)
    thinking = page.locator(f"{ASSISTANT_DONE} details.thinking")
    await expect(thinking).to_have_count(1)
    assert await thinking.get_attribute("open") is None, "thinking starts collapsed"

    await dashboard.send('!tool bash {"command":"for i in 1 2 3; do echo check $i passed; sleep 0.4; done"}')
    card = page.locator("#messages section.tool[data-tool-call-id]").last
    await expect(card.locator(".tool-name")).to_have_text("bash")
    await expect(card.locator(".tool-args")).to_contain_text('"command": "for i in 1 2 3')
    # The output streams in: the first line shows while the tool is still running.
    await expect(card.locator(".tool-output")).to_contain_text("check 1 passed")
    await expect(card.locator(".tool-state")).to_contain_text("running")
    await expect(card.locator(".tool-output")).to_have_text("check 1 passed\ncheck 2 passed\ncheck 3 passed")
    await expect(card.locator(".tool-state")).to_contain_text("done")
    assert await final_reply(page) == "echo: check 1 passed\ncheck 2 passed\ncheck 3 passed"
    # Tool results are shown inside the card of their call, not as messages of their own.
    await expect(page.locator("#messages article[data-role=toolResult]")).to_have_count(0)
    await expect(page.locator("#session-status")).to_have_text("idle")

    await expect(page.locator("#gateway-facts")).to_contain_text("0 runs active")
    await page.set_viewport_size(DESKTOP)
    await page.locator("#composer-input").fill("Summarise what the checks found.")
    await page.evaluate(
        "(s => { s.scrollTop = s.scrollHeight })(document.getElementById('transcript-scroll'))"
    )
    await expect(page.locator("#jump")).to_be_hidden()
    await page.mouse.move(5, DESKTOP["height"] - 10)
    target = screenshot_path(tmp_path)
    await page.screenshot(path=str(target))
    assert target.stat().st_size > 20_000


async def test_sign_in_then_a_reply_streams_in(dashboard: Dashboard) -> None:
    page = dashboard.page
    await page.goto(dashboard.url)
    await expect(page.locator("#auth-dialog")).to_be_visible()
    await page.fill("#auth-secret", "not-the-token")
    await page.click("#auth-submit")
    await expect(page.locator("#auth-error")).to_contain_text("refused")
    await page.fill("#auth-secret", dashboard.daemon.token)
    await page.click("#auth-submit")
    await connected(page)
    await expect(page.locator("#gateway-facts")).to_contain_text("gatewayd")
    await expect(page.locator("#gateway-facts")).to_contain_text("sandbox ")

    await dashboard.open_session()
    sentence = (
        "please summarise the gateway status, list every session that has an active run, and then "
        "explain in a few plain words how the dashboard keeps its transcript complete when the "
        "connection drops in the middle of a long reply"
    )
    await dashboard.send(sentence)
    final = "echo: " + sentence
    partial = await streamed_words(page, 4)
    assert final.startswith(partial) and len(partial) < len(final), partial
    assert await final_reply(page) == final
    await expect(page.locator("#messages article[data-role=user]")).to_have_count(1)
    await expect(page.locator("#messages article[data-role=assistant]")).to_have_count(1)
    meta = page.locator(ASSISTANT_DONE).last.locator(".msg-meta")
    await expect(meta).to_contain_text(re.compile(r"[\d,]+ in.*[\d,]+ out"))
    await expect(page.locator("#session-status")).to_have_text("idle")

    # The token is remembered: a reload goes straight back to the same session.
    await page.reload()
    await live(page)
    await expect(page.locator("#auth-dialog")).to_be_hidden()
    await expect(page.locator("#session-key")).to_have_text(dashboard.key)
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(1)


async def test_branch_at_a_message_appears_in_the_tree(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("first question")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(1)
    await dashboard.send("second question")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(2)
    first_reply = page.locator(ASSISTANT_DONE).first
    entry_id = await first_reply.get_attribute("data-entry-id")
    await first_reply.hover()
    await first_reply.locator("button.msg-action").click()

    branch = page.locator(f'li.tree-item[data-key="{dashboard.key}"] li.tree-item[data-kind=branch]')
    await expect(branch).to_have_count(1)
    await expect(branch).to_have_attribute("aria-selected", "true")
    # The branch shows the conversation up to that message only.
    await expect(page.locator("#messages article[data-role=user]")).to_have_count(1)
    await expect(page.locator(ASSISTANT_DONE)).to_have_text(re.compile("echo: first question"))
    branch_key = await branch.get_attribute("data-key")
    async with dashboard.client() as client:
        tree = await client.call("sessions.tree", {"key": dashboard.key})
    [child] = tree["root"]["children"]
    assert child["key"] == branch_key
    assert child["branchPoint"] == entry_id

    # The branch takes messages of its own; the parent is untouched.
    await dashboard.send("a different second question")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(2)
    assert await final_reply(page) == "echo: a different second question"
    parent = await dashboard.history(dashboard.key)
    assert assistant_texts(parent) == ["echo: first question", "echo: second question"]


async def test_switch_compact_and_reset_from_the_session_header(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("keep this")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(1)
    parent_id = await page.evaluate("gatewayDashboard.selected")

    # Branch from the latest message, then point the parent's key at the branch.
    await page.click("#action-branch")
    await expect(page.locator("#session-key")).to_have_text(re.compile(":branch:"))
    branch_id = await page.evaluate("gatewayDashboard.selected")
    assert branch_id != parent_id
    await page.click("#action-switch")
    await expect(page.locator("#prompt-fields input[name=key]")).to_have_value(dashboard.key)
    await page.click("#prompt-ok")
    await expect(page.locator("#session-key")).to_have_text(dashboard.key)
    await expect(page.locator(f'li.tree-item[data-session-id="{branch_id}"]')).to_have_attribute(
        "data-key", dashboard.key
    )
    async with dashboard.client() as client:
        assert (await client.call("chat.history", {"sessionKey": dashboard.key}))["sessionId"] == branch_id

    # faux/echo has too little history to compact: the answer is shown, nothing else changes.
    await page.click("#action-compact")
    await expect(page.locator("#toasts")).to_contain_text("Could not compact")

    await page.click("#action-reset")
    await page.click("#prompt-ok")
    await page.wait_for_function("shown => gatewayDashboard.selected !== shown", arg=branch_id)
    await expect(page.locator("#session-key")).to_have_text(dashboard.key)
    await expect(page.locator("#session")).to_have_attribute("data-feed", "live")
    fresh_id = await page.evaluate("gatewayDashboard.selected")
    assert fresh_id not in (parent_id, branch_id)
    await expect(page.locator("#messages article")).to_have_count(0)
    async with dashboard.client() as client:
        answer = await client.call("chat.history", {"sessionKey": dashboard.key})
    assert answer["sessionId"] == fresh_id
    assert answer["messages"] == []


async def test_stop_ends_a_long_run(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("!long 2000")
    await streamed_words(page, 15)
    await expect(page.locator("#session-status")).to_have_text("running")
    await expect(dashboard.tree_item()).to_have_attribute("data-status", "running")
    await expect(page.locator("#gateway-facts")).to_contain_text("1 run active")
    await page.click("#abort")
    reply = page.locator(ASSISTANT_DONE).last
    await expect(reply.locator(".msg-stop")).to_contain_text("Stopped")
    await expect(page.locator("#session-status")).to_have_text("idle")
    await expect(page.locator("#abort")).to_be_hidden()
    await expect(dashboard.tree_item()).to_have_attribute("data-status", "idle")
    await expect(page.locator("#gateway-facts")).to_contain_text("0 runs active")
    shown = await reply.locator(".msg-text").text_content() or ""
    await asyncio.sleep(0.5)
    assert await reply.locator(".msg-text").text_content() == shown, "the text kept growing"
    count = len(shown.split())
    assert 15 <= count < 2000
    assert shown.strip() == long_text(count)
    [*_, last] = await dashboard.history()
    assert last["stopReason"] == "aborted"
    assert text_of(last) == shown


async def test_dropped_connection_resumes_without_loss_or_duplicates(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("!long 160")
    await streamed_words(page, 15)
    await dashboard.context.set_offline(True)
    await expect(page.locator("#banner")).to_contain_text("reconnecting")
    held = await page.evaluate("gatewayDashboard.feed.transcript.seq")
    await asyncio.sleep(1.0)  # the run goes on while the dashboard is away
    await dashboard.context.set_offline(False)
    await live(page)
    await expect(page.locator("#banner")).to_be_hidden()

    assert await final_reply(page) == long_text(160)
    await expect(page.locator("#messages article[data-role=assistant]")).to_have_count(1)
    await expect(page.locator("#messages article[data-role=user]")).to_have_count(1)
    assert assistant_texts(await dashboard.history()) == [long_text(160)]
    resumed = await page.evaluate("gatewayDashboard.feed.lastSubscribe")
    assert resumed["afterSeq"] == held > 0, "the view continued from the last sessionSeq it had"
    assert resumed["replay"] == "exact"


async def test_reload_and_new_tab_mid_reply_show_the_whole_reply(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("!long 220")
    await streamed_words(page, 15)

    # A new tab (nothing of this page's state) joins in the middle of the reply: it shows the
    # reply from its first word, not from where it joined.
    other = await dashboard.new_page()
    await other.goto(page.url)
    await connected(other)
    joined = await streamed_words(other, 30)
    assert joined.startswith(long_text(30)), joined[:80]

    seq_before = await page.evaluate("gatewayDashboard.feed.transcript.seq")
    await page.reload()
    await live(page)
    await expect(page.locator("#auth-dialog")).to_be_hidden()
    resumed_at = await page.evaluate("gatewayDashboard.feed.lastSubscribe.afterSeq")
    assert resumed_at >= seq_before > 0, "the reload continued from the stored sessionSeq"

    for tab in (page, other):
        assert await final_reply(tab) == long_text(220)
        await expect(tab.locator("#messages article[data-role=assistant]")).to_have_count(1)
    assert assistant_texts(await dashboard.history()) == [long_text(220)]
    await other.close()


async def test_resume_after_the_event_log_was_pruned(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("before the outage")
    assert await final_reply(page) == "echo: before the outage"

    await dashboard.context.set_offline(True)
    await expect(page.locator("#banner")).to_be_visible()
    async with dashboard.client() as client:
        for index, text in enumerate(["while away one", "while away two"]):
            await client.call(
                "chat.send", {"sessionKey": dashboard.key, "message": text, "idempotencyKey": f"away-{index}"}
            )
            outcome = await client.call("agent.wait", {"runId": f"away-{index}", "timeoutMs": 20_000})
            assert outcome["status"] == "ok"
        session_id = (await client.call("chat.history", {"sessionKey": dashboard.key}))["sessionId"]
    async with Store.open(dashboard.database_url) as store:
        last = await store.events.last_seq(session_id)
        assert await store.events.prune(session_id, before_seq=last + 1, types={"message.delta"}) > 0

    await dashboard.context.set_offline(False)
    await connected(page)
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(3)
    texts = [await node.text_content() for node in await page.locator(f"{ASSISTANT_DONE} .msg-text").all()]
    assert texts == ["echo: before the outage", "echo: while away one", "echo: while away two"]
    await expect(page.locator("#messages article[data-role=user]")).to_have_count(3)
    resumed = await page.evaluate("gatewayDashboard.feed.lastSubscribe")
    assert resumed["replay"] == "compacted"


# --- layout -----------------------------------------------------------------------------------


def overlaps(a: dict[str, float] | None, b: dict[str, float] | None) -> bool:
    assert a is not None and b is not None
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


async def distance_to_end(page: Page) -> float:
    distance = await page.evaluate(
        "(s => s.scrollHeight - s.scrollTop - s.clientHeight)(document.getElementById('transcript-scroll'))"
    )
    assert isinstance(distance, int | float)
    return distance


async def test_notices_stay_clear_of_the_message_box(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    await dashboard.send("too short to compact")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(1)
    for viewport in (DESKTOP, PHONE):
        await page.set_viewport_size(viewport)
        await page.evaluate("document.getElementById('toasts').replaceChildren()")
        await page.click("#action-compact")
        toast = page.locator("#toasts .toast", has_text="Could not compact")
        await expect(toast).to_be_visible()
        box = await toast.bounding_box()
        assert not overlaps(box, await page.locator("#composer").bounding_box()), viewport
        assert box is not None and box["x"] + box["width"] <= viewport["width"]


async def test_latest_shows_only_when_the_end_is_out_of_view(dashboard: Dashboard) -> None:
    page = dashboard.page
    await dashboard.sign_in()
    await dashboard.open_session()
    short_key = dashboard.key + ":short"
    async with dashboard.client() as client:
        await client.call("chat.send", {"sessionKey": short_key, "message": "hi", "idempotencyKey": "sh-1"})
        outcome = await client.call("agent.wait", {"runId": "sh-1", "timeoutMs": 10_000})
        short_id = (await client.call("chat.history", {"sessionKey": short_key}))["sessionId"]
    assert outcome["status"] == "ok"
    await page.set_viewport_size(PHONE)
    await dashboard.send("!long 700")
    # Following a long reply: the view stays at its end, and "↓ Latest" stays hidden.
    await page.wait_for_function(
        "() => (s => s.scrollHeight > s.clientHeight + 400)(document.getElementById('transcript-scroll'))"
    )
    for _ in range(5):
        assert await page.locator("#jump").is_hidden()
        assert await distance_to_end(page) < 80
        await asyncio.sleep(0.1)
    # Scrolling up stops following and offers the way back.
    await page.mouse.move(PHONE["width"] / 2, PHONE["height"] / 2)
    await page.mouse.wheel(0, -400)
    await expect(page.locator("#jump")).to_be_visible()
    await page.click("#jump")
    await expect(page.locator("#jump")).to_be_hidden()
    assert await distance_to_end(page) < 80
    assert await final_reply(page) == long_text(700)
    await expect(page.locator("#jump")).to_be_hidden()

    # From the top of a long transcript to a session that fits on the screen: nothing to jump to.
    await page.evaluate("document.getElementById('transcript-scroll').scrollTop = 0")
    await expect(page.locator("#jump")).to_be_visible()
    await page.evaluate(f"location.hash = '#/session/{short_id}'")
    await expect(page.locator(f"{ASSISTANT_DONE} .msg-text")).to_have_text("echo: hi")
    await expect(page.locator("#jump")).to_be_hidden()


async def test_phone_header_and_queue_mode_fit(dashboard: Dashboard, tmp_path: Path) -> None:
    page = dashboard.page
    dashboard.key = "agent:main:release"  # shown in the screenshot
    await dashboard.sign_in()
    await dashboard.open_session(label="Release checklist")
    await dashboard.send("Start with the state of the workspace.")
    await expect(page.locator(ASSISTANT_DONE)).to_have_count(1)
    await page.set_viewport_size(PHONE)
    await dashboard.send("!long 1500")
    await expect(page.locator("#queue-mode")).to_be_visible()
    await streamed_words(page, 60)

    buttons = [
        await page.locator(selector).bounding_box()
        for selector in ("#action-branch", "#action-switch", "#action-compact", "#action-reset")
    ]
    assert all(box is not None for box in buttons)
    assert len({round(box["y"]) for box in buttons if box}) == 1, "the header buttons wrapped"
    assert all(box["x"] + box["width"] <= PHONE["width"] for box in buttons if box)
    # The queue-mode select is at least as wide as it would be with room to spare, so its
    # longest choice shows whole.
    sizes = await page.evaluate(
        """() => {
            const select = document.getElementById("queue-mode");
            const free = select.cloneNode(true);
            free.removeAttribute("id");
            free.style.position = "absolute";
            free.style.width = "auto";
            free.style.flex = "none";
            free.style.visibility = "hidden";
            select.parentElement.append(free);
            const natural = free.getBoundingClientRect().width;
            free.remove();
            const shown = select.getBoundingClientRect();
            return { natural, width: shown.width, right: shown.right };
        }"""
    )
    assert sizes["width"] >= sizes["natural"] and sizes["right"] <= PHONE["width"], sizes
    await page.mouse.move(5, 5)
    target = screenshot_path(tmp_path, "phone")
    await page.screenshot(path=str(target))
    assert target.stat().st_size > 10_000
    await page.click("#abort")
    await expect(page.locator("#session-status")).to_have_text("idle")


async def test_a_reconnect_takes_back_the_stopping_notice(stack: Stack, tmp_path: Path) -> None:
    """The gateway restarts: its "stopping" notice goes once the page is connected again."""
    home = tmp_path / "restarting"
    daemon = await asyncio.to_thread(start_daemon, home, env={"HOME": str(tmp_path / "user")})
    context = await stack.browser.new_context(viewport=DESKTOP)
    try:
        dash = Dashboard(daemon, context, await context.new_page(), "", "agent:main:restarting")
        dash.watch(dash.page)
        await dash.sign_in()
        await asyncio.to_thread(daemon.stop)
        notice = dash.page.locator("#toasts .toast", has_text="The gateway is stopping")
        await expect(notice).to_be_visible()
        daemon = await asyncio.to_thread(start_daemon, home, port=daemon.port, tag="again")
        await connected(dash.page)
        assert await notice.count() == 0
        assert dash.page_errors == []
    finally:
        await context.close()
        await asyncio.to_thread(daemon.stop)


async def test_transcript_model_ignores_duplicates_and_refuses_gaps(dashboard: Dashboard) -> None:
    """The page's own state model, fed out-of-order and repeated events directly."""
    page = dashboard.page
    await page.goto(dashboard.url)
    result = await page.evaluate(
        """async () => {
            const { Transcript } = await import("./transcript.js");
            const ev = (seq, name, fields) => ({
                event: "session." + name,
                payload: { sessionSeq: seq, ...fields },
            });
            const delta = (seq, id, text) =>
                ev(seq, "message.delta", { messageId: id, contentIndex: 0, kind: "text", delta: text });
            const t = new Transcript("s1");
            t.loadHistory({ messages: [
                { role: "user", content: [{ type: "text", text: "hi" }], __gateway: { id: "e1" } },
            ], sessionInfo: { lastSeq: 3, status: "idle" } });
            t.seq = 3;
            const out = [];
            out.push(t.apply(ev(4, "message.started", { messageId: "m2", role: "assistant" })));
            out.push(t.apply(delta(5, "m2", "he")));
            out.push(t.apply(delta(5, "m2", "he")));
            out.push(t.apply(delta(7, "m2", "!")));
            out.push(t.apply(delta(6, "m2", "llo")));
            const partial = Transcript.partialText(t.partials.get("m2"));
            out.push(t.apply(delta(7, "m9", "x")));
            const message = { role: "assistant", content: [{ type: "text", text: "hello" }] };
            out.push(t.apply(ev(7, "message.completed", { messageId: "m2", message })));
            t.loadHistory({ messages: [
                { role: "user", content: [{ type: "text", text: "hi" }], __gateway: { id: "e1" } },
                { ...message, __gateway: { id: "m2" } },
            ], sessionInfo: { lastSeq: 7, status: "idle" } });
            return { out, partial, order: t.order, partials: t.partials.size, seq: t.seq };
        }"""
    )
    assert result == {
        "out": ["applied", "applied", "duplicate", "gap", "applied", "headless", "applied"],
        "partial": "hello",
        "order": ["e1", "m2"],
        "partials": 0,
        "seq": 7,
    }


async def test_session_directory_builds_the_tree_and_moves_keys(dashboard: Dashboard) -> None:
    """The page's session directory: a key belongs to one session; children sit under parents;
    a listing does not undo a row announced while it was on its way."""
    page = dashboard.page
    await page.goto(dashboard.url)
    result = await page.evaluate(
        """async () => {
            const { SessionDirectory } = await import("./sessions.js");
            const d = new SessionDirectory();
            const row = (id, key, extra = {}) => ({ sessionId: id, key, keys: key ? [key] : [], ...extra });
            d.upsert(row("a", "agent:main:main", { updatedAt: 1 }));
            d.upsert(row("b", "agent:main:main:branch:1", { parentId: "a", createdAt: 2, updatedAt: 2 }));
            d.upsert(row("c", null, { parentId: "a", kind: "subagent", createdAt: 1, updatedAt: 3 }));
            const since = d.stamp;
            d.upsert(row("d", "agent:main:main", { updatedAt: 4 }));  // a reset or a switch took the key
            const listing = [
                row("a", "agent:main:main"),
                row("b", "agent:main:main:branch:1", { parentId: "a" }),
            ];
            d.replaceAll(listing, since);
            return {
                aKey: d.get("a").key,
                dKey: d.get("d").key,
                roots: d.forest().map((n) => [n.row.sessionId, n.children.map((c) => c.row.sessionId)]),
            };
        }"""
    )
    # "a" was listed with the key, but "d" took it after the listing was requested.
    assert result == {"aKey": None, "dKey": "agent:main:main", "roots": [["d", []], ["a", ["b"]]]}
