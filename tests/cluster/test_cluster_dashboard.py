"""The dashboard of one node follows a session another node runs, and names that node."""

from __future__ import annotations

import pytest
from playwright.async_api import async_playwright, expect

from tests.cluster.conftest import Cluster, needs_cluster
from tests.cluster.test_cluster import send, wait_run
from tests.e2e.test_dashboard import (
    CHROMIUM,
    CHROMIUM_ARGS,
    STREAMING,
    _require_chromium,
    final_reply,
    long_text,
    streamed_words,
)
from tests.e2e.test_dashboard import (
    connected as page_connected,
)
from tests.reliability._support import connected

pytestmark = [needs_cluster, pytest.mark.postgres, pytest.mark.browser, pytest.mark.slow]


async def test_a_reply_run_on_one_node_streams_into_the_dashboard_of_another(cluster: Cluster) -> None:
    _require_chromium()
    cluster.extra_env = {"GATEWAY_FAUX_PACE_MS": "20"}
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:dashboard-elsewhere"
    async with connected(b) as on_b:
        first = await send(on_b, key, "hello")  # b takes the session
        assert (await wait_run(on_b, first))["status"] == "ok"
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 860})
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                await page.goto(f"{a.http_url}/ui/")
                await page.fill("#auth-secret", a.token)
                await page.click("#auth-submit")
                await page_connected(page)
                await expect(page.locator("#gateway-facts")).to_contain_text("node a of 2 nodes")
                await page.locator(f'li.tree-item[data-key="{key}"]').click()
                await expect(page.locator("#session-key")).to_have_text(key)
                await expect(page.locator("#session-facts")).to_contain_text("on node b")
                await page.fill("#composer-input", "!long 80")
                await page.press("#composer-input", "Enter")
                assert len((await streamed_words(page, 10)).split()) >= 10  # live, from node b
                await expect(page.locator(STREAMING)).to_have_count(0, timeout=30_000)
                assert (await final_reply(page)).split() == long_text(80).split()
                assert errors == []
            finally:
                await browser.close()
