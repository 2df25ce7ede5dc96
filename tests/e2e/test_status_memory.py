"""The daemon hands the C allocator's free pages back every `[gateway] memory_trim_s` seconds, and
`status.memory` says how often and how long it took; 0 turns it off."""

from __future__ import annotations

import asyncio
import platform
import time
from pathlib import Path

import pytest

from tests.daemon import running_daemon
from tests.reliability._support import connected

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")


async def test_status_counts_the_allocator_trims(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config="[gateway]\nmemory_trim_s = 0.2\n") as daemon:
        async with connected(daemon) as client:
            deadline = time.monotonic() + 20
            memory = (await client.call("status"))["memory"]
            while memory["trims"] < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                memory = (await client.call("status"))["memory"]
    assert memory["trimIntervalS"] == 0.2
    assert memory["trims"] >= 2, memory
    assert memory["lastTrimMs"] is not None and memory["lastTrimMs"] >= 0
    # At rest the collector makes no full collection of its own: the trimmer makes them.
    assert memory["collector"]["trimmerCollections"] >= 1, memory


async def test_no_trims_when_turned_off(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config="[gateway]\nmemory_trim_s = 0\n") as daemon:
        async with connected(daemon) as client:
            await asyncio.sleep(0.5)
            memory = (await client.call("status"))["memory"]
    collector = memory.pop("collector")
    assert memory == {"trimIntervalS": 0.0, "trims": 0, "trimsReleasing": 0, "lastTrimMs": None}
    assert collector["trimmerCollections"] == 0


async def test_a_burst_of_runs_costs_few_collections(gateway_home: Path) -> None:
    """The collector's youngest generation is collected every 20,000 allocations, not Python's
    700: a burst of runs makes a few young collections and no full one (each walks every live
    session's objects with the event loop stopped). `status.memory.collector` shows the counts."""
    with running_daemon(gateway_home) as daemon:
        async with connected(daemon) as client:
            before = (await client.call("status"))["memory"]["collector"]
            keys = [f"agent:main:burst-{i}" for i in range(60)]
            sends = [{"sessionKey": key, "message": "!long 100", "idempotencyKey": key} for key in keys]
            started = await asyncio.gather(*(client.call("chat.send", send) for send in sends))
            for run in started:
                wait = {"runId": run["runId"], "timeoutMs": 60_000}
                outcome = await client.call("agent.wait", wait, timeout=65)
                assert outcome["status"] == "ok", outcome
            after = (await client.call("status"))["memory"]["collector"]
    young, middle, full = (a - b for a, b in zip(after["collections"], before["collections"], strict=True))
    print(f"collections during the burst: young {young}, middle {middle}, full {full}")
    assert young <= 8, after
    assert full == 0, after
    assert after["thresholds"][0] == 20_000


async def test_the_collector_threshold_is_a_setting(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config="[gateway]\ncollector_young_threshold = 700\n") as daemon:
        async with connected(daemon) as client:
            collector = (await client.call("status"))["memory"]["collector"]
    assert collector["thresholds"][0] == 700
