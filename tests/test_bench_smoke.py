"""The benchmarks still run: each `python -m bench.<name> --quick` exits 0 and prints its table.

The quick settings are tiny; each test runs one benchmark and checks its table (the numbers are
not checked, so sharing the cores with the rest of the suite does not matter): every row is
there with a ratio, nothing timed out, and the gateway lost no event. One benchmark per test,
rather than all of them started together, so that the suite's workers share them out and no
benchmark waits behind nine others on two cores. `bench.cluster` runs only when
GATEWAY_TEST_DATABASE_URL is set and that PostgreSQL and Redis (GATEWAY_TEST_REDIS_URL) answer;
it gets both through its own variables.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cluster import unavailable
from tests.cluster.conftest import REDIS_URL
from tests.sessions.conftest import PG_URL

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = {
    "agent_loop": 4,
    "cluster": 14,
    "compat": 6,
    "connect": 4,
    "fanout": 6,
    "runs": 3,
    "sessions": 8,
    "sessions --collector": 3,
    "startup": 5,
    "store": 10,
}
"""Benchmark (and options besides `--quick`) -> rows its quick run prints."""
CLUSTER_MISSING = unavailable(PG_URL, REDIS_URL) if PG_URL else "GATEWAY_TEST_DATABASE_URL is not set"
"""Why `bench.cluster` cannot run here, or None."""
pytestmark = pytest.mark.slow
_RATIO = re.compile(r"(?:\d[\d,]*\.\d\d|-)$")


QUICK_TIMEOUT_S = 240
"""A quick run takes seconds alone (`bench.cluster`, the longest, about 25 s on two cores); the
bound leaves room for a machine busy with the rest of the suite."""


def _table(name: str, home: Path) -> list[str]:
    """The rows of the table `bench.<name> --quick` prints (it must exit 0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["HOME"] = str(home)
    if PG_URL:
        env["GATEWAY_BENCH_DATABASE_URL"] = PG_URL
        env["GATEWAY_BENCH_REDIS_URL"] = REDIS_URL
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name.split(maxsplit=1)[0]}", *name.split()[1:], "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT_S,
        check=False,
    )
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, f"bench.{name} failed:\n{out}\n{err[-4000:]}"
    assert "ratios compare with a baseline from this same run" in out
    lines = out.splitlines()
    assert lines[0].split()[0] == "metric" and lines[0].split()[1] in ("setting", "backend"), out
    assert set(lines[1].replace(" ", "")) == {"-"}, out
    rows = []
    for line in lines[2:]:
        if not line.strip():
            break
        rows.append(line)
    return rows


@pytest.mark.timeout(QUICK_TIMEOUT_S + 30)
@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_quick_run_prints_a_row_per_measurement(name: str, tmp_path: Path) -> None:
    if name == "cluster" and CLUSTER_MISSING:
        pytest.skip(f"bench.{name}: {CLUSTER_MISSING}")
    rows = _table(name, tmp_path)
    assert len(rows) == BENCHMARKS[name], "\n".join(rows)
    for row in rows:
        assert _RATIO.search(row), row
        assert "[timed out]" not in row, row
        assert " lost]" not in row, row
    if name == "sessions":
        lost = [re.split(r"\s{2,}", r)[2] for r in rows if r.startswith("events lost")]
        assert lost == ["0", "0"], rows
    if name in ("sessions", "sessions --collector"):
        assert [r.split("  ")[0] for r in rows if r.startswith("word lateness")] == [
            "word lateness p50",
            "word lateness p99",
        ], rows
    if name == "sessions --collector":
        lost = [re.split(r"\s{2,}", r)[2] for r in rows if r.startswith("events lost")]
        assert lost == ["0"], rows
        assert all("collector at 700" in row for row in rows), rows
    if name == "cluster":
        lost = [re.split(r"\s{2,}", r)[2:5:2] for r in rows if "events lost" in r]
        assert lost == [["0", "0"]] * 3, rows
