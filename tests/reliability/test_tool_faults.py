"""Tools that misbehave, run through the daemon by the faux model: one that hangs, one that prints
gigabytes, one that forks a child and exits. Each runs under bubblewrap (agent `main`, sandbox
mode `auto`, when bwrap works here) and under the uid runner (agent `confined`, mode `uid`, when
the tests run as root)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.sandbox import SandboxMachine
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import (
    RssSampler,
    connected,
    event_log,
    processes_with,
    tool_message,
    wait_until,
)

_MACHINE = SandboxMachine(home=Path("/nonexistent-gateway-home"))
SANDBOX_TIMEOUT_S = 1.5
KILL_GRACE_S = 2.0  # the runners' SIGTERM -> SIGKILL grace
AGENTS = """
[[agents]]
id = "main"

[[agents]]
id = "confined"
sandbox_mode = "uid"
"""
MODES = [
    pytest.param(
        "main",
        id="bwrap",
        marks=pytest.mark.skipif(not _MACHINE.probe("bwrap").ok, reason="bubblewrap cannot run here"),
    ),
    pytest.param(
        "confined",
        id="uid",
        marks=pytest.mark.skipif(not _MACHINE.probe("uid").ok, reason="the uid runner needs root"),
    ),
]


def _daemon(factory: pytest.TempPathFactory, name: str, sandbox: str) -> Iterator[Daemon]:
    # Under a directory other users may traverse: the uid runner's users reach the workspace.
    root = Path(tempfile.mkdtemp(prefix=f"gateway-{name}-", dir="/tmp"))
    os.chmod(root, 0o711)
    daemon = start_daemon(root / "home", config=f"[sandbox]\n{sandbox}\n{AGENTS}")
    try:
        yield daemon
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def short_timeout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from _daemon(tmp_path_factory, "tools-timeout", f"timeout_s = {SANDBOX_TIMEOUT_S}")


@pytest.fixture(scope="module")
def long_timeout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from _daemon(tmp_path_factory, "tools-output", "timeout_s = 90\noutput_cap_bytes = 65536")


async def _tool_run(daemon: Daemon, key: str, args: dict[str, Any], *, wait_s: float = 30) -> dict[str, Any]:
    """Run `bash` with `args` in session `key`; returns the outcome with the tool's end event."""
    async with connected(daemon) as client:
        sent = await client.call(
            "chat.send", {"sessionKey": key, "message": tool_message("bash", args), "idempotencyKey": key}
        )
        assert sent["status"] == "started", sent
        outcome: dict[str, Any] = await client.call(
            "agent.wait", {"runId": key, "timeoutMs": int(wait_s * 1000)}, timeout=wait_s + 10
        )
        row = await client.call("sessions.describe", {"key": key})
    assert outcome["status"] == "ok" and outcome["terminationReason"] == "no_tool_calls", outcome
    assert row["status"] == "idle", row
    log = await event_log(daemon, key)
    (finished,) = [e for e in log if e["name"] == "tool.finished"]
    outcome["_tool"] = finished
    return outcome


@pytest.mark.parametrize("agent", MODES)
async def test_tool_that_hangs_is_killed_at_the_sandbox_timeout(short_timeout: Daemon, agent: str) -> None:
    marker = f"sleep 307.{len(agent)}"
    started = time.monotonic()
    # The model asks for ten minutes; the sandbox's cap wins.
    outcome = await _tool_run(short_timeout, f"agent:{agent}:hang", {"command": marker, "timeout": 600})
    elapsed = time.monotonic() - started
    tool = outcome["_tool"]
    assert tool["isError"], tool
    assert f"timed out after {SANDBOX_TIMEOUT_S:g} seconds" in tool["result"]["content"][0]["text"], tool
    assert SANDBOX_TIMEOUT_S * 1000 <= tool["durationMs"] < (SANDBOX_TIMEOUT_S + KILL_GRACE_S + 1) * 1000, (
        tool
    )
    assert elapsed < SANDBOX_TIMEOUT_S + KILL_GRACE_S + 5, elapsed
    assert not processes_with(marker), "the hung command survived its timeout"


@pytest.mark.parametrize("agent", MODES)
async def test_tool_that_forks_a_child_and_exits_leaves_no_stray_process(
    short_timeout: Daemon, agent: str
) -> None:
    marker = f"sleep 317.{len(agent)}"
    started = time.monotonic()
    outcome = await _tool_run(short_timeout, f"agent:{agent}:fork", {"command": f"({marker} &) ; echo done"})
    tool = outcome["_tool"]
    assert not tool["isError"] and tool["result"]["content"][0]["text"] == "done", tool
    # The orphaned child held the output pipe open; the tool still returned at once.
    assert time.monotonic() - started < 5
    assert tool["durationMs"] < 2000, tool
    assert not processes_with(marker), "a backgrounded child outlived the tool call"


@pytest.mark.slow
async def test_tool_printing_gigabytes_keeps_output_capped_and_daemon_memory_flat(
    long_timeout: Daemon,
) -> None:
    """Once, in the default confinement: both runners read output through the same capped loop."""
    total = 2_000_000_000
    key = "agent:main:firehose"
    async with RssSampler(long_timeout) as rss:
        outcome = await _tool_run(long_timeout, key, {"command": f"yes | head -c {total}"}, wait_s=80)
    tool = outcome["_tool"]
    assert not tool["isError"], tool
    details = tool["result"]["details"]
    assert details["totalBytes"] == total, "the command did not run to the end"
    text = tool["result"]["content"][0]["text"]
    assert len(text.encode()) <= 65536 and "[Output truncated" in text, text[-300:]
    grew = (rss.peak - rss.baseline) / 2**20
    baseline = rss.baseline / 2**20
    print(f"{total / 1e9:.0f} GB of tool output: daemon RSS peak +{grew:.1f} MiB over {baseline:.1f} MiB")
    assert grew < 64, f"daemon RSS rose by {grew:.1f} MiB while the tool printed {total / 2**30:.1f} GiB"
    # What the session keeps: the capped result and the throttled partial tails (about 60 kB a
    # second here). Measured on the events, not the file: the WAL grows with the number of
    # commits and how long readers hold off checkpoints, which a busy machine stretches.
    stored = sum(len(json.dumps(event)) for event in await event_log(long_timeout, key))
    assert stored < 8 * 2**20, f"the tool's output flooded the event log ({stored:,} bytes)"
    await wait_until(lambda: not processes_with(f"head -c {total}"), timeout=5, what="the pipeline to end")
