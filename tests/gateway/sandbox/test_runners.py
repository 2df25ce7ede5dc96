from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_core.abort import AbortController
from agent_core.tools import CommandResult
from gateway.sandbox import (
    PathOutsideWorkspaceError,
    ResourceLimits,
    SandboxMachine,
    SandboxRunner,
    SandboxSettings,
    is_secret_name,
    scrub_env,
)
from gateway.sandbox.runners import bwrap_argv

MACHINE = SandboxMachine(home=Path("/nonexistent-gateway-home"))
needs_bwrap = pytest.mark.skipif(not MACHINE.probe("bwrap").ok, reason="bubblewrap cannot run here")
needs_uid = pytest.mark.skipif(not MACHINE.probe("uid").ok, reason="the uid runner needs root")
CONFINED = [pytest.param("bwrap", marks=needs_bwrap), pytest.param("uid", marks=needs_uid)]


def runner_for(workspace: Path, mode: str, **settings: Any) -> SandboxRunner:
    return MACHINE.runner(SandboxSettings(workspace=workspace, mode=mode, **settings))  # type: ignore[arg-type]


async def run(runner: SandboxRunner, command: str, cwd: Path, **kwargs: object) -> CommandResult:
    return await runner.run(
        command,
        cwd=cwd,
        env=kwargs.get("env"),  # type: ignore[arg-type]
        timeout_s=kwargs.get("timeout_s"),  # type: ignore[arg-type]
        signal=kwargs.get("signal"),  # type: ignore[arg-type]
        on_output=None,
    )


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if marker in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


async def wait_until_no_process_with(marker: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not processes_with(marker):
            return True
        await asyncio.sleep(0.05)
    return False


def test_secret_names() -> None:
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "SENTRY_DSN"):
        assert is_secret_name(name), name
    for name in ("PATH", "LANG", "LC_ALL", "EDITOR", "KEYBOARD_LAYOUT"):
        assert not is_secret_name(name), name


def test_scrub_env_keeps_only_the_basics_and_what_is_allowed(tmp_path: Path) -> None:
    source = {
        "PATH": "/usr/bin",
        "LANG": "en_US.UTF-8",
        "HOME": "/root",
        "OPENAI_API_KEY": "sk-secret",
        "LC_ALL": "C",
        "LC_TOKEN": "nope",
        "EDITOR": "vi",
        "GITHUB_TOKEN": "ghp",
    }
    env = scrub_env(tmp_path, ["LC_*", "GITHUB_TOKEN", "MISSING"], source=source, extra={"EDITOR": "nano"})
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "en_US.UTF-8",
        "TERM": "dumb",
        "HOME": str(tmp_path),
        "LC_ALL": "C",
        "GITHUB_TOKEN": "ghp",
    }
    assert scrub_env(tmp_path, ["EDITOR"], source=source, extra={"EDITOR": "nano"})["EDITOR"] == "nano"


@pytest.mark.parametrize("mode", [*CONFINED, "unsafe-host"])
async def test_runners_do_not_leak_secrets(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-should-not-leak")
    monkeypatch.setenv("PROJECT_FLAG", "visible")
    runner = runner_for(workspace, mode, allowed_env=("PROJECT_FLAG",))
    result = await run(runner, "env; pwd", workspace)
    assert result.exit_code == 0, result
    assert "should-not-leak" not in result.output
    assert "OPENAI_API_KEY" not in result.output
    assert "PROJECT_FLAG=visible" in result.output
    assert f"HOME={workspace.resolve()}" in result.output


async def test_runners_refuse_a_working_directory_outside(workspace: Path, outside: Path) -> None:
    with pytest.raises(PathOutsideWorkspaceError):
        await run(runner_for(workspace, "unsafe-host"), "pwd", outside)


@pytest.mark.parametrize("mode", [*CONFINED, "unsafe-host"])
async def test_nothing_the_command_starts_outlives_the_call(workspace: Path, mode: str) -> None:
    """Backgrounded, double-forked and `setsid` daemons alike."""
    marker = f"{uuid.uuid4().hex[:8]}"
    command = (
        f"(setsid sleep 300.{len(mode)}1 {marker} &) ; (sleep 300.{len(mode)}2 {marker} &) ; "
        f"nohup setsid bash -c 'sleep 300.{len(mode)}3 {marker}' >/dev/null 2>&1 & echo started"
    )
    command = command.replace(f" {marker}", "") + f" # {marker}"
    result = await run(runner_for(workspace, mode), command, workspace)
    assert result.output.strip() == "started", result
    assert await wait_until_no_process_with(f"300.{len(mode)}"), "a process outlived the call"


@pytest.mark.parametrize("mode", CONFINED)
async def test_process_limit_stops_a_fork_flood(workspace: Path, mode: str) -> None:
    runner = runner_for(workspace, mode, limits=ResourceLimits(max_processes=16))
    result = await run(runner, "for i in $(seq 1 100); do sleep 30.7 & done; wait", workspace, timeout_s=20)
    assert result.aborted or result.exit_code != 0, result
    assert runner.limit_note is not None and "16 processes" in runner.limit_note
    assert await wait_until_no_process_with("sleep 30.7")


@needs_uid
async def test_uid_runner_cannot_touch_the_daemon(workspace: Path) -> None:
    pid = os.getpid()
    result = await run(
        runner_for(workspace, "uid"),
        f"id -u; cat /proc/{pid}/environ >/dev/null 2>&1 || echo no-environ; "
        f"kill -0 {pid} 2>/dev/null || echo no-signal",
        workspace,
    )
    uid, *rest = result.output.split()
    assert int(uid) >= MACHINE.pool.base and rest == ["no-environ", "no-signal"], result


async def test_runners_cap_timeout_and_output(workspace: Path) -> None:
    runner = runner_for(workspace, "unsafe-host", timeout_s=0.3, output_cap_bytes=100)
    result = await run(runner, "head -c 5000 /dev/zero | tr '\\0' x; sleep 10", workspace, timeout_s=60)
    assert result.timed_out and result.timeout_s == 0.3
    assert result.truncated and len(result.output) == 100


@needs_bwrap
def test_bwrap_argv_isolates_everything(workspace: Path) -> None:
    argv = bwrap_argv("bwrap", workspace, workspace, ["bash", "-c", "true"])
    for flag in ("--unshare-all", "--die-with-parent", "--new-session"):
        assert flag in argv
    joined = " ".join(argv)
    assert "--ro-bind /usr /usr" in joined
    assert f"--bind {workspace} {workspace}" in joined
    assert "--tmpfs /tmp" in joined
    assert "/etc/shadow" not in joined
    assert argv[-4:] == ["--", "bash", "-c", "true"]


@pytest.fixture
async def listener() -> AsyncIterator[int]:
    """A TCP server on a loopback port of the host."""

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


CONNECT = "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected || echo blocked"


@needs_bwrap
async def test_bwrap_has_no_network(workspace: Path, listener: int) -> None:
    command = CONNECT.format(port=listener)
    confined = await run(runner_for(workspace, "unsafe-host"), command, workspace)
    assert confined.output.strip() == "connected"  # the listener is reachable from the host
    sandboxed = await run(runner_for(workspace, "bwrap"), command, workspace)
    assert sandboxed.output.strip() == "blocked"


@needs_bwrap
async def test_bwrap_writes_only_to_the_workspace(workspace: Path, outside: Path) -> None:
    leak = f"/tmp/sandbox-leak-{uuid.uuid4().hex}"
    script = (
        "echo hello > inside.txt && echo wrote-inside; "
        f"echo x > {outside}/evil.txt || echo outside-refused; "
        f"echo x > {outside}/secret.txt || echo secret-refused; "
        "touch /usr/evil || echo usr-refused; "
        "touch /etc/evil || echo etc-refused; "
        f"echo x > {leak} && echo tmp-private"
    )
    result = await run(runner_for(workspace, "bwrap"), script, workspace)
    lines = result.output.split("\n")
    expected_lines = (
        "wrote-inside",
        "outside-refused",
        "secret-refused",
        "usr-refused",
        "etc-refused",
        "tmp-private",
    )
    for expected in expected_lines:
        assert expected in lines, result.output
    assert (workspace / "inside.txt").read_text() == "hello\n"
    assert not (outside / "evil.txt").exists()
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"
    assert not Path("/usr/evil").exists() and not Path("/etc/evil").exists()
    assert not Path(leak).exists()


@needs_bwrap
async def test_bwrap_cannot_read_outside_and_sees_a_scrubbed_environment(
    workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    result = await run(
        runner_for(workspace, "bwrap"),
        f"cat {outside}/secret.txt || echo unreadable; env; ls /etc",
        workspace,
    )
    assert "TOP SECRET" not in result.output and "unreadable" in result.output
    assert "should-not-leak" not in result.output
    assert f"HOME={workspace.resolve()}" in result.output
    assert "shadow" not in result.output


@needs_bwrap
async def test_bwrap_abort_kills_the_whole_sandbox(workspace: Path) -> None:
    marker = f"sandboxed-{uuid.uuid4().hex}"
    controller = AbortController()
    runner = runner_for(workspace, "bwrap")
    task = asyncio.create_task(
        run(runner, f"bash -c 'sleep 300; : {marker}' & echo started > started.txt; wait", workspace,
            signal=controller.signal)
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while not processes_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_with(marker), "the sandboxed process never started"
    controller.abort()
    result = await asyncio.wait_for(task, 10)
    assert result.aborted
    assert await wait_until_no_process_with(marker)


@needs_bwrap
async def test_bwrap_timeout(workspace: Path) -> None:
    result = await run(runner_for(workspace, "bwrap", timeout_s=0.5), "sleep 30", workspace)
    assert result.timed_out
