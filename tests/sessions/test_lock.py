from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sessions.errors import StateDirLocked
from sessions.lock import StateDirLock

# A second process that tries the lock: prints "locked:<message>" or "acquired", then (when told
# to hold) keeps the lock until its stdin closes or it is killed.
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from sessions.errors import StateDirLocked
    from sessions.lock import StateDirLock

    lock = StateDirLock(Path(sys.argv[1]))
    try:
        lock.acquire()
    except StateDirLocked as error:
        print("locked:" + str(error), flush=True)
        sys.exit(3)
    print("acquired", flush=True)
    if len(sys.argv) > 2:
        sys.stdin.read()
    lock.release()
    """
)


def try_in_child(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(home)], capture_output=True, text=True, timeout=60, check=False
    )


def test_second_process_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    home = tmp_path / "state"
    with StateDirLock(home) as lock:
        assert lock.held
        assert (home / "gateway.lock").read_text().strip() == str(os.getpid())
        refused = try_in_child(home)
        assert refused.returncode == 3, refused.stderr
        message = refused.stdout.strip()
        assert str(os.getpid()) in message
        assert str(home) in message
        assert "GATEWAY_HOME" in message and "stop" in message
    allowed = try_in_child(home)
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.strip() == "acquired"


def test_lock_held_by_another_process_refuses_us_and_dies_with_it(tmp_path: Path) -> None:
    home = tmp_path / "state"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "acquired"
        lock = StateDirLock(home)
        with pytest.raises(StateDirLocked) as info:
            lock.acquire()
        assert info.value.pid == child.pid
        assert f"process {child.pid}" in str(info.value)
        assert not lock.held
        child.send_signal(signal.SIGKILL)  # no clean-up: the kernel must drop the lock
        child.wait(timeout=30)
        lock.acquire()
        assert lock.held
        lock.release()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()


async def test_lock_is_exclusive_within_one_process_and_release_is_idempotent(tmp_path: Path) -> None:
    home = tmp_path / "new" / "state"
    async with StateDirLock(home) as first:
        assert (home.stat().st_mode & 0o777) == 0o700
        with pytest.raises(StateDirLocked):
            StateDirLock(home).acquire()
        first.acquire()  # already held: nothing happens
        assert first.held
    assert not first.held
    await first.aclose()
    first.release()
    with StateDirLock(home):
        pass
