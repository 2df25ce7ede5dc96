"""Tests that need the machine to themselves when pytest-xdist runs the suite on several workers.

A test marked `exclusive` measures something the other workers' load would distort (memory growth
over a soak). It starts once the tests running on the other workers have ended, and none starts
while it runs. Two lock files in the directory the workers of one run share do it: every test
holds `running` shared while it runs; an exclusive test takes `gate` first (no new test gets past
it) and then `running` exclusively. `gate` is what keeps the exclusive test from waiting forever
behind a stream of shared holders.

The locks are taken around the whole test protocol, outside pytest-timeout's clock: a test may
wait as long as an exclusive test runs. They live as long as the worker process.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

MARKER = "exclusive: runs alone under pytest-xdist (other workers wait while it runs)"


class MachineLock:
    """The two locks of one pytest-xdist run, seen from one worker."""

    def __init__(self, directory: Path) -> None:
        self._gate: BinaryIO = open(directory / "exclusive-gate.lock", "ab")  # noqa: SIM115
        self._running: BinaryIO = open(directory / "exclusive-running.lock", "ab")  # noqa: SIM115

    @contextlib.contextmanager
    def hold(self, *, exclusive: bool) -> Iterator[None]:
        """Block until this worker may run a test (alone if `exclusive`), for the block."""
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._running, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except BaseException:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            raise
        if not exclusive:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._running, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(self._gate, fcntl.LOCK_UN)

    def close(self) -> None:
        self._gate.close()
        self._running.close()


def worker_lock(config: pytest.Config) -> MachineLock | None:
    """The run's lock when this process is an xdist worker, else None (nothing runs beside it)."""
    if not hasattr(config, "workerinput"):
        return None
    # Each worker's base temp is `<run directory>/popen-gwN`: the run directory is shared.
    shared = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    return MachineLock(shared)
