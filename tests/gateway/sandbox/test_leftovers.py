"""`sweep_leftovers`: a daemon starting in a state directory ends the bubblewraps an earlier
daemon of that directory left behind, and nothing else."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from gateway.sandbox import SandboxMachine, SandboxSettings
from gateway.sandbox.leftovers import sweep_leftovers
from gateway.sandbox.runners import OWNER_ENV

MACHINE = SandboxMachine(home=Path(f"/nonexistent-gateway-home-{uuid.uuid4().hex[:8]}"))
needs_bwrap = pytest.mark.skipif(not MACHINE.probe("bwrap").ok, reason="bubblewrap cannot run here")


def _marked(owner: str) -> subprocess.Popen[bytes]:
    """A process in a session of its own, with a child, marked as started for `owner`."""
    script = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    env = {**os.environ, OWNER_ENV: owner}
    return subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)


def _group(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except OSError:
            continue
    return found


def _wait_for(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_the_marked_process_and_its_group_die_and_other_homes_keep_theirs(tmp_path: Path) -> None:
    mine, theirs = _marked(str(tmp_path / "a")), _marked(str(tmp_path / "b"))
    try:
        assert _wait_for(lambda: len(_group(mine.pid)) == 2 and len(_group(theirs.pid)) == 2)
        # The child carries the mark too; it may already be gone with the group when the sweep
        # comes to it.
        killed = sweep_leftovers(str(tmp_path / "a"))
        assert mine.pid in killed and theirs.pid not in killed, killed
        assert mine.wait(timeout=5) == -9
        assert _wait_for(lambda: not _group(mine.pid)), "the child in its group survived"
        assert theirs.poll() is None and len(_group(theirs.pid)) == 2
        assert sweep_leftovers(str(tmp_path / "c")) == []
    finally:
        for proc in (mine, theirs):
            for member in _group(proc.pid):
                member.kill()
            proc.wait(timeout=5)


@needs_bwrap
async def test_a_running_bubblewrap_carries_the_mark_outside_only(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runner = MACHINE.runner(SandboxSettings(workspace=workspace, mode="bwrap", timeout_s=30))
    inside = await runner.run(
        f'echo "${{{OWNER_ENV}:-unset}}"',
        cwd=workspace,
        env=None,
        timeout_s=None,
        signal=None,
        on_output=None,
    )
    assert inside.output.strip() == "unset"

    tag = f"{uuid.uuid4().int % 10_000}.{os.getpid() % 1000}"
    held = asyncio.ensure_future(
        runner.run(
            f"sleep {tag}; echo finished",
            cwd=workspace,
            env=None,
            timeout_s=None,
            signal=None,
            on_output=None,
        )
    )
    deadline = time.monotonic() + 10
    while not [
        p
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "bwrap" and tag in " ".join(p.info["cmdline"] or ())
    ]:
        assert time.monotonic() < deadline, "the sandbox did not start"
        await asyncio.sleep(0.05)
    killed = sweep_leftovers(str(MACHINE.home))
    assert killed, "the running bubblewrap was not found by its mark"
    result = await asyncio.wait_for(held, 10)
    assert "finished" not in result.output and result.exit_code != 0, result
