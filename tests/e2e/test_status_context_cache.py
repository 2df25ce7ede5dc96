"""`status` shows the live sessions' cached contexts against their budget, as a reload sets it."""

from __future__ import annotations

from pathlib import Path

from tests.daemon import running_daemon
from tests.reliability._support import connected

BUDGET = "[runs]\ncontext_cache_bytes = {budget}\n"


async def test_status_counts_cached_contexts_against_the_budget(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config=BUDGET.format(budget=300_000)) as daemon:
        async with connected(daemon) as client:
            before = (await client.call("status"))["contextCache"]
            assert before == {"sessions": 0, "chargedBytes": 0, "budgetBytes": 300_000}
            for n, key in enumerate(("agent:main:cache-a", "agent:main:cache-b")):
                params = {"sessionKey": key, "message": f"hello {n}", "idempotencyKey": f"cache-{n}"}
                await client.call("chat.send", params)
                assert (await client.call("agent.wait", {"runId": f"cache-{n}", "timeoutMs": 20_000}))[
                    "status"
                ] == "ok"
            cached = (await client.call("status"))["contextCache"]
            assert cached["sessions"] == 2 and 0 < cached["chargedBytes"] <= 300_000, cached

            (config_path,) = daemon.home.glob("gateway*.toml")
            config_path.write_text(BUDGET.format(budget=0))
            await client.call("config.reload")
            params = {"sessionKey": "agent:main:cache-a", "message": "again", "idempotencyKey": "cache-again"}
            await client.call("chat.send", params)
            assert (await client.call("agent.wait", {"runId": "cache-again", "timeoutMs": 20_000}))[
                "status"
            ] == "ok"
            emptied = (await client.call("status"))["contextCache"]
            assert emptied["budgetBytes"] == 0 and emptied["chargedBytes"] < cached["chargedBytes"], emptied
