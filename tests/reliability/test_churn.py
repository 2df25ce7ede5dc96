"""The churn benchmark's quick mode (`python -m bench.churn --quick`): 300 connect / handshake /
call / disconnect cycles (close frame, bare FIN, TCP reset in turn) leave the daemon with the
descriptors and memory it had before (the benchmark exits 1 otherwise)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_connection_churn_leaks_no_descriptor_and_no_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.churn", "--quick"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    report = f"{done.stdout}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    fds = re.search(r"^open FDs after churn\s+N=300\s+(\d+)\s+before churn\s+(\d+)", done.stdout, re.M)
    assert fds is not None, report
    assert int(fds.group(1)) == int(fds.group(2)), report
    assert "ratios compare with a baseline from this same run" in done.stdout
