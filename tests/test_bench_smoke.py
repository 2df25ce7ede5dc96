"""The benchmarks still run: each `python -m bench.<name> --quick` exits 0 and prints its table.

The quick settings are tiny (a few seconds each); the numbers are not checked, only that every
row is there with a ratio, and that the gateway benchmarks lost nothing and did not time out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_RATIO = re.compile(r"(?:\d[\d,]*\.\d\d|-)$")


def _quick(name: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, f"bench.{name} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert "ratios compare with a baseline from this same run" in done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["metric", "setting"], done.stdout
    assert set(lines[1].replace(" ", "")) == {"-"}, done.stdout
    rows = []
    for line in lines[2:]:
        if not line.strip():
            break
        rows.append(line)
    return rows


def _value(row: str, metric: str) -> str:
    """The value cell of a row whose metric starts with `metric`."""
    return re.split(r"\s{2,}", row.strip())[2] if row.startswith(metric) else ""


@pytest.mark.parametrize(
    ("name", "count"),
    [("agent_loop", 2), ("fanout", 6), ("sessions", 5), ("startup", 4)],
)
def test_quick_run_prints_a_row_per_measurement(name: str, count: int) -> None:
    rows = _quick(name)
    assert len(rows) == count, "\n".join(rows)
    for row in rows:
        assert _RATIO.search(row.rstrip()), row
        assert "[timed out]" not in row, row
        assert " lost]" not in row, row
    if name == "sessions":
        lost = [_value(r, "events lost") for r in rows if r.startswith("events lost")]
        assert lost == ["0"], rows
