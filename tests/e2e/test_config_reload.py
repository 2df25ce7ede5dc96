"""Run limits changed by `config.reload` apply to the running daemon at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError, GatewayClient
from tests.daemon import running_daemon
from tests.e2e.helpers import eventually

LIMITS = "[runs]\nmax_concurrent = {runs}\nlane_depth = {depth}\n"
HELD = "!sleep 60000 held"  # a run that lasts until it is aborted


async def _slots(client: GatewayClient) -> dict[str, Any]:
    status = await client.call("status")
    slots: dict[str, Any] = status["runSlots"]
    return slots


async def _reload(client: GatewayClient, path: Path, *, runs: int, depth: int) -> list[str]:
    path.write_text(LIMITS.format(runs=runs, depth=depth))
    changed: list[str] = (await client.call("config.reload"))["changed"]
    return changed


async def test_reloaded_run_limits_are_enforced(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config=LIMITS.format(runs=1, depth=1)) as daemon:
        path = daemon.home / "gateway.toml"
        async with (
            GatewayClient(daemon.url, token=daemon.token) as client,
            GatewayClient(daemon.url, token=daemon.token) as waiting_client,
        ):
            first, second = "agent:main:reload-a", "agent:main:reload-b"
            for key, idem in ((first, "held-a"), (second, "held-b")):
                params = {"sessionKey": key, "message": HELD, "idempotencyKey": idem}
                assert (await client.call("chat.send", params))["status"] == "started"

            async def one_runs_one_waits() -> bool:
                return await _slots(client) == {"active": 1, "waiting": 1}

            await eventually(one_runs_one_waits)
            with pytest.raises(CallError) as full:
                await client.call("chat.inject", {"sessionKey": first, "message": "a note"})
            assert full.value.code == "UNAVAILABLE"

            changed = await _reload(client, path, runs=2, depth=3)
            assert {"runs.max_concurrent", "runs.lane_depth"} <= set(changed)

            async def both_run() -> bool:
                return await _slots(client) == {"active": 2, "waiting": 0}

            await eventually(both_run)
            # The deeper lane takes an operation behind the run (it waits for the run to end).
            note = asyncio.create_task(
                waiting_client.call("chat.inject", {"sessionKey": first, "message": "a note"})
            )

            async def queued_on_the_lane() -> bool:
                depths = (await client.call("status"))["queueDepths"]
                return bool(depths.get((await _session_id(client, first)), 0) >= 2)

            await eventually(queued_on_the_lane)

            assert await _reload(client, path, runs=2, depth=1) == ["runs.lane_depth"]
            with pytest.raises(CallError) as refused:
                params = {"sessionKey": first, "message": "one too many", "idempotencyKey": "extra"}
                await client.call("chat.send", params)
            assert refused.value.code == "UNAVAILABLE"

            for key in (first, second):
                await client.call("chat.abort", {"sessionKey": key})
            assert (await note)["ok"] is True
            for idem in ("held-a", "held-b"):
                outcome = await client.call("agent.wait", {"runId": idem, "timeoutMs": 20_000})
                assert outcome["status"] == "aborted"


async def _session_id(client: GatewayClient, key: str) -> str:
    session_id: str = (await client.call("sessions.describe", {"key": key}))["session"]["sessionId"]
    return session_id
