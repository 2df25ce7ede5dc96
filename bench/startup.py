"""Start-up: time from spawning `gatewayd` to its first accepted connection, and its idle memory,
beside a bare Python process (`python -c pass`) started the same way; and the time `gatewayctl`
takes to start (`gatewayctl --help`: every command's parser built, nothing sent), beside the same.

    .venv/bin/python -m bench.startup            # 5 starts of each kind (about half a minute)
    .venv/bin/python -m bench.startup --quick    # 1 start of each kind, RSS after 0.2 s
    .venv/bin/python -m bench.startup --compile-each-start   # as the environment has it (below)

A start is timed from just before the process is spawned until a client completes the gateway
handshake (`connect.challenge`, `connect`, hello-ok), retrying every 5 ms while nothing listens
or the gateway answers that it is still starting. Cold starts get a new home (database created
and migrated); warm starts reuse the home of the previous cold start. Idle RSS is read with psutil
one second after the handshake. The baseline is `python -c pass` with the same interpreter:
spawn to exit, and its peak RSS (`ru_maxrss` from `wait4`). Values are medians.

Bytecode: an installed gateway runs from modules compiled when it was installed. A source
checkout run with `PYTHONDONTWRITEBYTECODE` set never keeps its bytecode, so every start would
also compile each of the project's modules (over a hundred milliseconds here), which measures the
compiler rather than the start-up. Every process of a run (the baseline too) therefore shares a
private bytecode cache (`PYTHONPYCACHEPREFIX`, a temporary directory), filled by one unmeasured
start of each kind; `--compile-each-start` leaves the environment as it is instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Mapping
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


def _start(home: Path, settle_s: float, env: Mapping[str, str]) -> tuple[float, float]:
    """One start of gatewayd with `home` and `env` (over this process's environment): (seconds to
    first handshake, idle RSS in MiB after `settle_s` more seconds)."""
    daemon = spawn(home, env=env)
    try:
        seconds = asyncio.run(_first_handshake(daemon))
        time.sleep(settle_s)
        rss = psutil.Process(daemon.pid).memory_info().rss / 2**20
    finally:
        daemon.stop()
    return seconds, rss


def _bare_python(env: Mapping[str, str]) -> tuple[float, float]:
    """One `python -c pass` with `env` over this process's environment: (seconds from spawn to
    exit, peak RSS in MiB)."""
    return _to_exit(["-c", "pass"], env)


def _gatewayctl_help(env: Mapping[str, str]) -> float:
    """Seconds from spawning `gatewayctl --help` (its output discarded) to its exit."""
    return _to_exit(["-m", "gateway.cli.gatewayctl", "--help"], env)[0]


def _to_exit(args: list[str], env: Mapping[str, str]) -> tuple[float, float]:
    """The interpreter with `args`, stdout discarded: (seconds from spawn to exit, peak RSS in MiB)."""
    start = time.monotonic()
    pid = os.posix_spawn(
        sys.executable,
        [sys.executable, *args],
        {**os.environ, **env},
        file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
    )
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"python {' '.join(args)} failed")
    return elapsed, usage.ru_maxrss / 1024  # KiB on Linux


def run(repeats: int, settle_s: float = SETTLE_S, *, compile_each_start: bool = False) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-startup-bytecode-") as bytecode:
        # An empty PYTHONDONTWRITEBYTECODE is unset for Python: the cache is written as it fills.
        env = {} if compile_each_start else {"PYTHONPYCACHEPREFIX": bytecode, "PYTHONDONTWRITEBYTECODE": ""}
        return _run(repeats, settle_s, env)


def _run(repeats: int, settle_s: float, env: Mapping[str, str]) -> list[Row]:
    cold: list[tuple[float, float]] = []
    warm: list[tuple[float, float]] = []
    bare: list[tuple[float, float]] = []
    ctl: list[float] = []
    # Unmeasured starts first, so that every measured one finds the interpreter's and the
    # project's files in the page cache (and their bytecode in the cache) as the others do.
    _bare_python(env)
    _gatewayctl_help(env)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        _start(home, 0.0, env)
        _start(home, 0.0, env)
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            home = Path(tmp) / "home"
            home.mkdir()
            bare.append(_bare_python(env))
            cold.append(_start(home, settle_s, env))
            bare.append(_bare_python(env))
            warm.append(_start(home, settle_s, env))
            ctl.append(_gatewayctl_help(env))
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
            "start to exit",
            "gatewayctl --help",
            median(ctl) * 1e3,
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
    parser.add_argument(
        "--compile-each-start",
        action="store_true",
        help="no private bytecode cache: with PYTHONDONTWRITEBYTECODE set, every start compiles",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    repeats, settle_s = (1, 0.2) if args.quick else (5, SETTLE_S)
    rows = run(repeats, settle_s, compile_each_start=args.compile_each_start)
    print(render(rows))
    if args.compile_each_start:
        print("\n(bytecode as the environment has it: nothing cached by this run)")
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
