from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

import psutil
import pytest

from agent_core.abort import AbortController, AbortSignal
from agent_core.agent_types import AgentToolResult
from agent_core.errors import ToolError
from agent_core.tools import CommandResult, LocalRunner, OutputCallback, create_bash_tool

from .conftest import call, text_of


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def wait_for_file(path: Path, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


async def wait_until_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_runs_in_the_workspace_and_returns_combined_output(workspace: Path) -> None:
    result = await call(create_bash_tool(workspace), {"command": "pwd; echo out; echo err >&2"})
    assert text_of(result).split("\n") == [str(workspace), "out", "err"]
    assert result.details["exitCode"] == 0


async def test_empty_output(workspace: Path) -> None:
    assert text_of(await call(create_bash_tool(workspace), {"command": "true"})) == "(no output)"


async def test_non_zero_exit_raises_with_the_output_tail(workspace: Path) -> None:
    with pytest.raises(ToolError) as caught:
        await call(create_bash_tool(workspace), {"command": "echo failing step; exit 3"})
    assert str(caught.value) == "failing step\n\nCommand exited with code 3"


async def test_environment_is_passed_to_the_command(workspace: Path) -> None:
    tool = create_bash_tool(workspace, env={"PATH": os.environ["PATH"], "GREETING": "hi there"})
    assert text_of(await call(tool, {"command": "echo $GREETING"})) == "hi there"


async def test_output_streams_before_the_command_ends(workspace: Path) -> None:
    updates: list[tuple[float, str]] = []

    def on_update(partial: AgentToolResult) -> None:
        updates.append((time.monotonic(), text_of(partial)))

    tool = create_bash_tool(workspace, update_interval_s=0.05)
    started = time.monotonic()
    result = await call(tool, {"command": "echo first; sleep 1; echo second"}, on_update=on_update)
    finished = time.monotonic()
    assert text_of(result) == "first\nsecond"
    early = [text for at, text in updates if at - started < 0.8]
    assert early and early[0] == "first\n"
    assert finished - started >= 1.0
    assert updates[-1][1] == "first\nsecond\n"


async def test_long_output_keeps_the_tail_with_a_notice(workspace: Path) -> None:
    result = await call(create_bash_tool(workspace), {"command": "seq 1 5000"})
    text = text_of(result)
    lines = text.split("\n")
    assert lines[0] == "3001" and "5000" in lines
    assert "[Output truncated: showing the last 2000 lines (9.8KB) of 23.3KB." in text
    assert "redirect the output to a file" in text
    assert result.details["truncation"]["truncatedBy"] == "lines"


async def test_timeout_kills_the_command(workspace: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError) as caught:
        await call(create_bash_tool(workspace), {"command": "echo waiting; sleep 30", "timeout": 0.5})
    assert time.monotonic() - started < 5
    assert str(caught.value) == "waiting\n\nCommand timed out after 0.5 seconds"


async def test_abort_from_another_task_kills_the_whole_process_group(workspace: Path) -> None:
    controller = AbortController()
    pid_file = workspace / "child.pid"
    tool = create_bash_tool(workspace)
    task = asyncio.create_task(
        call(
            tool,
            {"command": f"sleep 300 & echo $! > {pid_file}; echo started; wait"},
            signal=controller.signal,
        )
    )
    child = int(await wait_for_file(pid_file))
    assert not gone(child)
    controller.abort()
    with pytest.raises(ToolError) as caught:
        await asyncio.wait_for(task, 10)
    assert str(caught.value) == "started\n\nCommand aborted"
    assert await wait_until_gone(child)


async def test_children_that_ignore_sigterm_are_killed_after_the_grace_period(workspace: Path) -> None:
    controller = AbortController()
    pid_file = workspace / "stubborn.pid"
    tool = create_bash_tool(workspace, runner=LocalRunner(kill_grace_s=0.3))
    command = f"bash -c 'trap \"\" TERM; echo $$ > {pid_file}; while :; do sleep 0.05; done' & wait"
    task = asyncio.create_task(call(tool, {"command": command}, signal=controller.signal))
    child = int(await wait_for_file(pid_file))
    controller.abort()
    with pytest.raises(ToolError, match="Command aborted"):
        await asyncio.wait_for(task, 10)
    assert await wait_until_gone(child)


async def test_cancelling_the_awaiting_task_also_kills_the_group(workspace: Path) -> None:
    pid_file = workspace / "cancel.pid"
    task = asyncio.create_task(
        call(create_bash_tool(workspace), {"command": f"sleep 300 & echo $! > {pid_file}; wait"})
    )
    child = int(await wait_for_file(pid_file))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(child)


async def test_already_aborted_signal_does_not_start_the_command(workspace: Path) -> None:
    controller = AbortController()
    controller.abort()
    with pytest.raises(ToolError, match="Command aborted"):
        await call(create_bash_tool(workspace), {"command": "touch ran"}, signal=controller.signal)
    assert not (workspace / "ran").exists()


async def test_output_flood_is_capped_in_memory(workspace: Path) -> None:
    updates = 0

    def on_update(partial: AgentToolResult) -> None:
        nonlocal updates
        updates += 1

    tool = create_bash_tool(workspace, runner=LocalRunner(output_cap_bytes=256 * 1024))
    tracemalloc.start()
    try:
        result = await call(tool, {"command": "yes | head -c 200000000"}, on_update=on_update)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024
    assert result.details["totalBytes"] == 200_000_000
    assert len(text_of(result).encode()) < 60 * 1024
    assert "of 190.7MB" in text_of(result)


async def test_runner_output_is_bounded_by_its_cap(workspace: Path) -> None:
    runner = LocalRunner(output_cap_bytes=1000)
    result = await runner.run(
        "head -c 50000 /dev/zero | tr '\\0' a; echo; echo END",
        cwd=workspace,
        env=None,
        timeout_s=None,
        signal=None,
        on_output=None,
    )
    assert result.truncated and result.total_bytes == 50005
    assert len(result.output) == 1000 and result.output.endswith("a\nEND\n")


async def test_bash_uses_the_runner_seam(workspace: Path) -> None:
    calls: list[dict[str, object]] = []

    class FakeRunner:
        async def run(
            self,
            command: str,
            *,
            cwd: Path,
            env: Mapping[str, str] | None,
            timeout_s: float | None,
            signal: AbortSignal | None,
            on_output: OutputCallback | None,
        ) -> CommandResult:
            calls.append({"command": command, "cwd": cwd, "timeout_s": timeout_s})
            assert on_output is not None
            on_output("fake output\n")
            return CommandResult(exit_code=0, output="fake output\n", truncated=False, total_bytes=12)

    updates: list[AgentToolResult] = []
    tool = create_bash_tool(workspace, runner=FakeRunner(), update_interval_s=0)
    result = await call(tool, {"command": "anything", "timeout": 7}, on_update=updates.append)
    assert text_of(result) == "fake output"
    assert calls == [{"command": "anything", "cwd": workspace, "timeout_s": 7.0}]
    assert [text_of(update) for update in updates] == ["fake output\n"]


async def test_killed_by_a_signal_is_reported(workspace: Path) -> None:
    with pytest.raises(ToolError, match="Command was killed by signal SIGKILL"):
        await call(create_bash_tool(workspace), {"command": "kill -9 $$"})
