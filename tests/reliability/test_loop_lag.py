"""The event-loop lag probe behind `status.eventLoopLagMs` (`gateway.loop_lag`): a loop blocked
for a while shows up as lag, the histogram difference between two snapshots gives the
percentiles of the time in between, and the daemon reports it."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from gateway.loop_lag import BUCKETS_MS, LagProbe, histogram_percentile
from tests.daemon import Daemon
from tests.reliability._support import connected


async def test_a_blocked_event_loop_shows_up_as_lag() -> None:
    probe = LagProbe(interval_s=0.01, window=100)
    probe.start()
    await asyncio.sleep(0.05)
    before = probe.snapshot()
    time.sleep(0.25)  # something blocks the loop
    await asyncio.sleep(0.05)
    after = probe.snapshot()
    await probe.aclose()
    await probe.aclose()  # idempotent
    assert after["maxMs"] >= 200, after
    assert after["maxSinceStartMs"] >= 200
    assert after["samples"] > before["samples"]
    assert histogram_percentile(before["histogram"], after["histogram"], 1.0) == 500
    assert sum(after["histogram"]["counts"]) == after["samples"]


def test_histogram_percentile_reads_the_samples_between_two_snapshots() -> None:
    probe = LagProbe(window=10)
    for lag in (0.5, 0.5, 3, 40):
        probe.record(lag)
    first = probe.snapshot()
    for lag in [0.2] * 98 + [150, 9000]:
        probe.record(lag)
    second = probe.snapshot()
    assert histogram_percentile(first["histogram"], second["histogram"], 0.50) == 1
    assert histogram_percentile(first["histogram"], second["histogram"], 0.99) == 200
    assert histogram_percentile(first["histogram"], second["histogram"], 1.0) == math.inf
    assert histogram_percentile(second["histogram"], second["histogram"], 0.99) is None
    assert second["histogram"]["le"] == [*BUCKETS_MS, None]
    assert second["maxMs"] == 9000 and second["windowS"] == 1.0  # the window keeps the last ten


def test_probe_refuses_nonsense_settings() -> None:
    with pytest.raises(ValueError):
        LagProbe(interval_s=0)


async def test_status_reports_event_loop_lag(daemon: Daemon) -> None:
    async with connected(daemon) as client:
        await asyncio.sleep(0.5)
        status = await client.call("status")
    lag = status["eventLoopLag"]
    assert status["eventLoopLagMs"] == lag["p99Ms"] >= 0
    assert lag["samples"] >= 3 and lag["intervalMs"] == 100
