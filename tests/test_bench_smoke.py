"""The benchmarks still run: each `python -m bench.<name> --quick` exits 0 and prints its table.

The quick settings are tiny; the runs are started together (their numbers are not checked,
so sharing the cores does not matter) and each test then checks one table: every row is there
with a ratio, nothing timed out, and the gateway lost no event. `bench.cluster` runs only when
GATEWAY_TEST_DATABASE_URL is set and that PostgreSQL and Redis (GATEWAY_TEST_REDIS_URL) answer;
it gets both through its own variables.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
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
    "startup": 4,
    "store": 9,
}
"""Benchmark (and options besides `--quick`) -> rows its quick run prints."""
CLUSTER_MISSING = unavailable(PG_URL, REDIS_URL) if PG_URL else "GATEWAY_TEST_DATABASE_URL is not set"
"""Why `bench.cluster` cannot run here, or None."""
_RATIO = re.compile(r"(?:\d[\d,]*\.\d\d|-)$")


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["HOME"] = str(tmp_path_factory.mktemp("bench-home"))
    if PG_URL:
        env["GATEWAY_BENCH_DATABASE_URL"] = PG_URL
        env["GATEWAY_BENCH_REDIS_URL"] = REDIS_URL
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", f"bench.{name.split()[0]}", *name.split()[1:], "--quick"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in BENCHMARKS
        if name != "cluster" or not CLUSTER_MISSING
    }
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _table(proc: subprocess.Popen[str], name: str) -> list[str]:
    out, err = proc.communicate(timeout=100)
    assert proc.returncode == 0, f"bench.{name} failed:\n{out}\n{err[-4000:]}"
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


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_quick_run_prints_a_row_per_measurement(
    name: str, quick_runs: dict[str, subprocess.Popen[str]]
) -> None:
    if name not in quick_runs:
        pytest.skip(f"bench.{name}: {CLUSTER_MISSING}")
    rows = _table(quick_runs[name], name)
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
