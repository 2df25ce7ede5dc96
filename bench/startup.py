"""Start-up: time from spawning `gatewayd` to its first accepted connection, and its idle memory,
beside a bare Python process (`python -c pass`) started the same way.

    .venv/bin/python -m bench.startup            # 5 starts of each kind (about half a minute)
    .venv/bin/python -m bench.startup --quick    # 1 start of each kind, RSS after 0.2 s

A start is timed from just before the process is spawned until a client completes the gateway
handshake (`connect.challenge`, `connect`, hello-ok), retrying every 5 ms while nothing listens
or the gateway answers that it is still starting. Cold starts get a new home (database created
and migrated); warm starts reuse the home of the previous cold start. Idle RSS is read with psutil
one second after the handshake. The baseline is `python -c pass` with the same interpreter:
spawn to exit, and its peak RSS (`ru_maxrss` from `wait4`). Values are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench._daemon import Daemon, spawn
from bench._report import Row, median, render
from bench._wire import WireClient, WireError

RETRY_S = 0.005
START_TIMEOUT_S = 60.0
SETTLE_S = 1.0


async def _first_handshake(daemon: Daemon) -> float:
    """Seconds from spawn to the first completed handshake. Raises RuntimeError when the daemon
    exits or does not answer within START_TIMEOUT_S."""
    deadline = daemon.started_at + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            raise RuntimeError(f"gatewayd exited with {daemon.proc.returncode}:\n{daemon.logs()}")
        client: WireClient | None = None
        try:
            client = await WireClient.open(daemon.host, daemon.port, timeout=5)
            await client.gateway_connect(daemon.token)
            return time.monotonic() - daemon.started_at
        except (OSError, WireError, TimeoutError):
            await asyncio.sleep(RETRY_S)
        finally:
            if client is not None:
                client.close()
    raise RuntimeError(f"gatewayd did not accept a connection within {START_TIMEOUT_S} s")


def _start(home: Path, settle_s: float) -> tuple[float, float]:
    """One start of gatewayd with `home`: (seconds to first handshake, idle RSS in MiB after
    `settle_s` more seconds)."""
    daemon = spawn(home)
    try:
        seconds = asyncio.run(_first_handshake(daemon))
        time.sleep(settle_s)
        rss = psutil.Process(daemon.pid).memory_info().rss / 2**20
    finally:
        daemon.stop()
    return seconds, rss


def _bare_python() -> tuple[float, float]:
    """One `python -c pass`: (seconds from spawn to exit, peak RSS in MiB)."""
    start = time.monotonic()
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], dict(os.environ))
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("python -c pass failed")
    return elapsed, usage.ru_maxrss / 1024  # KiB on Linux


def run(repeats: int, settle_s: float = SETTLE_S) -> list[Row]:
    cold: list[tuple[float, float]] = []
    warm: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    _bare_python()  # warm the interpreter's files into the page cache
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            home = Path(tmp) / "home"
            home.mkdir()
            bare.append(_bare_python())
            cold.append(_start(home, settle_s))
            bare.append(_bare_python())
            warm.append(_start(home, settle_s))
    base_s = median([b[0] for b in bare]) * 1e3
    base_rss = median([b[1] for b in bare])
    return [
        Row(
            "start to first handshake",
            "cold (new home)",
            median([c[0] for c in cold]) * 1e3,
            "ms",
            "python -c pass",
            base_s,
        ),
        Row(
            "start to first handshake",
            "warm (existing home)",
            median([w[0] for w in warm]) * 1e3,
            "ms",
            "python -c pass",
            base_s,
        ),
        Row(
            "idle RSS after start",
            "cold (new home)",
            median([c[1] for c in cold]),
            "MiB",
            "python -c pass",
            base_rss,
        ),
        Row(
            "idle RSS after start",
            "warm (existing home)",
            median([w[1] for w in warm]),
            "MiB",
            "python -c pass",
            base_rss,
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one start of each kind")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run(1, settle_s=0.2) if args.quick else run(5)
    print(render(rows))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
