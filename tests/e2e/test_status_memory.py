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


async def test_no_trims_when_turned_off(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config="[gateway]\nmemory_trim_s = 0\n") as daemon:
        async with connected(daemon) as client:
            await asyncio.sleep(0.5)
            memory = (await client.call("status"))["memory"]
    assert memory == {"trimIntervalS": 0.0, "trims": 0, "trimsReleasing": 0, "lastTrimMs": None}
