"""Client worker processes of a benchmark, started together and released at the same moment.

Each worker is `python -m <module> --worker <spec JSON>`: it sets up its clients, prints `ready`,
waits for `go` on its standard input, runs, and prints one JSON line with its results.

    with Workers("bench.sessions", specs) as workers:
        workers.ready("a client worker failed to set up its sessions")
        results = workers.go()
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any

__all__ = ["Workers"]


class Workers:
    def __init__(self, module: str, specs: Sequence[dict[str, Any]]) -> None:
        self._procs = [
            subprocess.Popen(
                [sys.executable, "-m", module, "--worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for spec in specs
        ]

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for proc in self._procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return [proc.pid for proc in self._procs]

    def ready(self, failure: str) -> None:
        """Wait until every worker has said `ready`; raise RuntimeError(`failure`) otherwise."""
        for proc in self._procs:
            if _line(proc).strip() != "ready":
                raise RuntimeError(failure)

    def go(self) -> list[dict[str, Any]]:
        """Release every worker at once; their JSON results, in order."""
        for proc in self._procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return [json.loads(_line(proc)) for proc in self._procs]


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"a client worker exited ({proc.wait()})")
    return line
