"""The sandbox against the real daemon: attacks a prompt-injected agent would try from `bash`
(`!tool bash {...}` makes the faux model call the tool), with mediation set to let HIGH commands
through so that only the runner stands in the way. Under bubblewrap, under the uid runner (what
`auto` picks when bubblewrap cannot create namespaces, simulated with a bwrap that fails like it
does in a container), and with no confining runner at all (bash is refused, and says why)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.sandbox import SandboxMachine
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import connected, event_log, log_records, processes_with, tool_message

PROVIDER_KEY = "sk-provider-key-that-must-not-leak"
FAKE_BWRAP = """#!/bin/sh
echo 'bwrap: No permissions to create a new namespace, likely because the kernel does not \
allow non-privileged user namespaces.' >&2
exit 1
"""
LENIENT = '[sandbox]\ndeny_threshold = "critical"\ntimeout_s = 30\n'
needs_bwrap = pytest.mark.skipif(
    not SandboxMachine(home=Path("/nonexistent")).probe("bwrap").ok, reason="bubblewrap cannot run here"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the uid runner needs root")


@pytest.fixture(scope="module")
def open_dir() -> Iterator[Path]:
    """Homes under a directory other users may traverse (the uid runner's users need to reach
    the workspaces inside them)."""
    root = Path(tempfile.mkdtemp(prefix="gateway-security-", dir="/tmp"))
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _start(home: Path, config: str) -> Daemon:
    return start_daemon(home, config=config, env={"OPENAI_API_KEY": PROVIDER_KEY})


def _fake_bwrap(directory: Path) -> Path:
    script = directory / "bwrap-in-a-container"
    script.write_text(FAKE_BWRAP)
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def bwrap_daemon(open_dir: Path) -> Iterator[Daemon]:
    daemon = _start(open_dir / "bwrap-home", LENIENT)
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def uid_daemon(open_dir: Path) -> Iterator[Daemon]:
    config = LENIENT + f'bwrap_path = "{_fake_bwrap(open_dir)}"\n'
    daemon = _start(open_dir / "uid-home", config)
    try:
        yield daemon
    finally:
        daemon.stop()


async def _bash(daemon: Daemon, key: str, command: str, *, timeout: float = 60) -> dict[str, Any]:
    """Run `command` through the model's bash tool; the `tool.finished` event."""
    async with connected(daemon) as client:
        sent = await client.call(
            "chat.send",
            {"sessionKey": key, "message": tool_message("bash", {"command": command}), "idempotencyKey": key},
        )
        assert sent["status"] == "started", sent
        wait = {"runId": key, "timeoutMs": int(timeout * 1000)}
        outcome = await client.call("agent.wait", wait, timeout=timeout + 5)
    assert outcome["status"] == "ok", outcome
    (finished,) = [e for e in await event_log(daemon, key) if e["name"] == "tool.finished"]
    return finished


def _text(finished: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in finished["result"]["content"])


async def _sandbox_status(daemon: Daemon) -> tuple[dict[str, Any], dict[str, Any]]:
    async with connected(daemon) as client:
        health = await client.call("health")
        status = await client.call("status")
    return health["sandbox"], status["sandbox"]


ATTACKS = {
    "token": "cat {home}/token; ls {home}",
    "database": "head -c 64 {home}/*.db",
    "environ": "cat /proc/$PPID/environ; cat /proc/{pid}/environ",
    "signal": "kill -9 $PPID; kill -9 {pid}",
}


async def _attack_fails(daemon: Daemon, runner: str) -> None:
    token = (daemon.home / "token").read_text().strip()
    for name, template in ATTACKS.items():
        command = template.format(home=daemon.home, pid=daemon.proc.pid)
        finished = await _bash(daemon, f"agent:main:{runner}-attack-{name}", command)
        text = _text(finished)
        assert token not in text and PROVIDER_KEY not in text and "SQLite format" not in text, (name, text)
        assert daemon.proc.poll() is None, f"{name}: the daemon died"
    marker = f"sleep 917.{len(runner)}"
    finished = await _bash(
        daemon, f"agent:main:{runner}-attack-daemonize", f"setsid {marker} & (setsid {marker}1 &); echo left"
    )
    assert _text(finished) == "left", finished
    await asyncio.sleep(0.5)
    assert not processes_with(marker), "a setsid daemon outlived the call"


@needs_bwrap
async def test_bubblewrap_stops_the_attacks(bwrap_daemon: Daemon) -> None:
    health, status = await _sandbox_status(bwrap_daemon)
    assert health["runner"] == status["runner"] == "bwrap" and health["confined"] is True, health
    assert health["mode"] == "auto" and health["limits"]["maxProcesses"] == 64
    assert "sandbox: mode auto, runner bwrap (confined" in bwrap_daemon.out_path.read_text()
    await _attack_fails(bwrap_daemon, "bwrap")


@needs_root
async def test_auto_falls_back_to_the_uid_runner_and_says_so(uid_daemon: Daemon) -> None:
    health, _ = await _sandbox_status(uid_daemon)
    assert health["runner"] == "uid" and health["confined"] is True, health
    banner = uid_daemon.out_path.read_text()
    assert "sandbox: mode auto, runner uid (confined" in banner, banner
    [ready] = [r for r in log_records(uid_daemon) if r.get("event") == "sandbox ready"]
    assert ready["runner"] == "uid" and ready["mode"] == "auto"
    finished = await _bash(uid_daemon, "agent:main:uid-audit", "chmod 777 notes.txt 2>/dev/null; id -u")
    assert int(_text(finished)) >= 2_000_000_000, finished
    [audit] = [r for r in log_records(uid_daemon) if r.get("tool_call_id") == finished["toolCallId"]]
    assert audit["runner"] == "uid" and audit["mode"] == "auto" and audit["decision"] == "allowed"
    assert audit["agent_id"] == "main" and audit["session_id"], audit
    await _attack_fails(uid_daemon, "uid")


async def test_auto_refuses_bash_when_nothing_confines(open_dir: Path) -> None:
    config = f'[sandbox]\nbwrap_path = "{_fake_bwrap(open_dir)}"\nuid_count = 0\n'
    daemon = _start(open_dir / "refusing-home", config)
    try:
        health, status = await _sandbox_status(daemon)
        assert health["runner"] == status["runner"] == "none" and health["confined"] is False, health
        assert "NO RUNNER, bash is refused" in daemon.out_path.read_text()
        warning = [r for r in log_records(daemon) if r.get("event") == "sandbox not confining"]
        assert warning and "No permissions to create a new namespace" in warning[0]["reason"], warning
        finished = await _bash(daemon, "agent:main:refused", f"cat {daemon.home}/token > stolen.txt")
        text = _text(finished)
        assert finished["isError"] and text.startswith("bash is unavailable: no sandbox can confine"), text
        assert "unsafe-host" in text and "uid_count = 0" in text
        assert not list(daemon.home.rglob("stolen.txt"))
        [audit] = [r for r in log_records(daemon) if r.get("event") == "sandbox.unavailable"]
        assert audit["tool_call_id"] == finished["toolCallId"] and audit["agent_id"] == "main", audit
    finally:
        daemon.stop()


async def _health_latencies(daemon: Daemon, stop: threading.Event) -> list[float]:
    samples: list[float] = []
    async with connected(daemon) as client:
        while not stop.is_set():
            started = time.perf_counter()
            await client.call("health")
            samples.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.01)
    return samples


LIST_DESCRIPTORS = 'for f in /proc/self/fd/*; do echo "$f $(readlink "$f")"; done'


@pytest.mark.parametrize("runner", ["bwrap", "uid"])
async def test_a_command_holds_none_of_the_daemons_descriptors(
    runner: str, request: pytest.FixtureRequest
) -> None:
    """Only stdin (`/dev/null`) and the output pipe: not the gateway's listening socket, its
    clients' sockets or the database (an event loop that spawns without closing inheritable
    descriptors would hand the command the port it could then accept connections on)."""
    if runner == "bwrap" and not SandboxMachine(home=Path("/nonexistent")).probe("bwrap").ok:
        pytest.skip("bubblewrap cannot run here")
    if runner == "uid" and os.geteuid() != 0:
        pytest.skip("the uid runner needs root")
    daemon: Daemon = request.getfixturevalue(f"{runner}_daemon")
    async with connected(daemon):  # one more client socket the command must not see
        finished = await _bash(daemon, f"agent:main:fds-{runner}", LIST_DESCRIPTORS)
    lines = _text(finished).splitlines()
    held = {line.split(" ", 1)[0].rsplit("/", 1)[1]: line.partition(" ")[2] for line in lines}
    # (1 is the pipe of the `$(...)` that reads the links; 2 the tool's output pipe.)
    assert held["0"] == "/dev/null" and held["1"].startswith("pipe:") and held["2"].startswith("pipe:"), lines
    # The glob's own directory descriptor may show, already closed when readlink runs.
    assert set(held) - {"0", "1", "2"} <= {"3"} and held.get("3", "") in ("", "/proc/self/fd"), lines


@needs_bwrap
@pytest.mark.exclusive  # health's latency is measured: other workers' load would be in it
async def test_a_fork_flood_ends_at_the_process_limit_and_health_stays_fast(bwrap_daemon: Daemon) -> None:
    # A first run imports what runs need (exec mediation and its grammar, the engine's loop):
    # done before measuring, so that health's latency is the flood's alone.
    await _bash(bwrap_daemon, "agent:main:fork-flood-warm-up", "true")
    # The concurrent client runs in a thread of its own, so the test's own work on this event
    # loop does not count as the daemon's latency.
    stop = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        prober = pool.submit(asyncio.run, _health_latencies(bwrap_daemon, stop))
        try:
            await asyncio.sleep(0.3)
            finished = await _bash(
                bwrap_daemon, "agent:main:fork-flood", "for i in $(seq 1 300); do sleep 20.9 & done; wait"
            )
        finally:
            stop.set()
        samples = prober.result()
    text = _text(finished)
    assert finished["isError"] and "more than 64 processes at once" in text, text
    assert finished["durationMs"] < 15_000, finished
    assert not processes_with("sleep 20.9")
    p99 = statistics.quantiles(samples, n=100)[98]
    assert len(samples) > 20 and p99 < 50, f"health p99 {p99:.1f} ms over {len(samples)} calls"


async def test_a_command_that_crashed_the_shell_grammar_runs_and_the_daemon_lives(
    open_dir: Path,
) -> None:
    """`{` between some non-ASCII characters at the end of a line used to crash the bash
    grammar's C scanner, taking the whole daemon down with a segmentation fault. Bash reads the
    line as one word, a command name it does not find, and so does mediation now."""
    daemon = _start(open_dir / "grammar-home", "")
    try:
        finished = await _bash(daemon, "agent:main:grammar-crash", "\u0502{\U00088b79")
        assert "command not found" in _text(finished), finished
        assert daemon.proc.poll() is None, "the daemon died"
        async with connected(daemon) as client:
            assert (await client.call("health"))["ok"] is True
    finally:
        daemon.stop()
