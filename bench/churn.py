"""Connection churn: N connect / handshake / call / disconnect cycles against one daemon, and what
they leave behind: the daemon's open file descriptors and RSS after, beside the same numbers
before (after a warm-up of the same cycles), from psutil.

    .venv/bin/python -m bench.churn              # N = 10,000 (a minute or two)
    .venv/bin/python -m bench.churn --quick      # N = 300, a few seconds
    .venv/bin/python -m bench.churn -n 50000 --concurrency 16

Each cycle opens a WebSocket (`bench._wire.WireClient`), completes the gateway handshake, calls
`health`, and goes away in one of three ways, in turn: a WebSocket close frame then FIN, a FIN
without a close frame, and a TCP reset (the client vanishes). `--concurrency` cycles run at once.
After the last one the daemon must be back to one connection (the probe's own) before the
"after" numbers are read; the run exits non-zero when descriptors grew by more than
`--fd-slack` or RSS by more than `--rss-slack` (fraction) plus 4 MiB.

Rows: open FDs (after vs before), RSS (after vs before), and the time of one cycle at p99 over
the last tenth of the cycles beside the first tenth (a daemon that degrades with churn shows a
ratio above 1).
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import time
from dataclasses import dataclass

import psutil

from bench._daemon import Daemon, gateway_daemon
from bench._report import Row, percentile, render
from bench._wire import WireClient

WARMUP = 200
_OP_CLOSE = 0x8


@dataclass
class Usage:
    fds: int
    rss_mib: float


def _usage(pid: int) -> Usage:
    proc = psutil.Process(pid)
    return Usage(fds=proc.num_fds(), rss_mib=proc.memory_info().rss / 2**20)


async def _cycle(daemon: Daemon, n: int) -> float:
    started = time.monotonic()
    client = await WireClient.open(daemon.host, daemon.port)
    try:
        await client.gateway_connect(daemon.token, caps=())
        await client.request("health")
    finally:
        way = n % 3
        transport = client.transport
        if way == 0 and transport is not None:
            transport.write(_close_frame())
            try:
                await asyncio.wait_for(asyncio.shield(client.closed), 5)
            except TimeoutError:
                client.close()
        elif way == 1:
            client.close()
        elif transport is not None:
            transport.abort()
    return time.monotonic() - started


def _close_frame() -> bytes:
    """A masked client close frame with code 1000 (mask of zeros: the payload goes as is)."""
    payload = struct.pack("!H", 1000)
    return bytes((0x80 | _OP_CLOSE, 0x80 | len(payload))) + b"\x00\x00\x00\x00" + payload


async def _run_cycles(daemon: Daemon, count: int, concurrency: int, offset: int = 0) -> list[float]:
    times: list[float] = [0.0] * count
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            index = next_index
            next_index += 1
            times[index] = await _cycle(daemon, offset + index)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return times


async def _connections(daemon: Daemon) -> int:
    """The daemon's connection count, as seen by a probe connection (which counts itself)."""
    probe = await WireClient.open(daemon.host, daemon.port)
    try:
        await probe.gateway_connect(daemon.token, caps=())
        status = await probe.request("status")
        return int(status["connections"])
    finally:
        probe.close()


async def _settle(daemon: Daemon, timeout: float = 20.0) -> None:
    """Wait until only the probe is connected, then a moment for buffers to be freed."""
    deadline = time.monotonic() + timeout
    while await _connections(daemon) > 1:
        if time.monotonic() > deadline:
            raise RuntimeError("connections were still open after the churn")
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)


async def measure(daemon: Daemon, cycles: int, concurrency: int) -> tuple[Usage, Usage, list[float], float]:
    await _run_cycles(daemon, WARMUP, concurrency)
    await _settle(daemon)
    before = _usage(daemon.pid)
    started = time.monotonic()
    times = await _run_cycles(daemon, cycles, concurrency, offset=WARMUP)
    elapsed = time.monotonic() - started
    await _settle(daemon)
    after = _usage(daemon.pid)
    return before, after, times, elapsed


def rows(before: Usage, after: Usage, times: list[float], cycles: int) -> list[Row]:
    tenth = max(1, len(times) // 10)
    setting = f"N={cycles:,}"
    return [
        Row("open FDs after churn", setting, after.fds, "", "before churn", before.fds),
        Row("daemon RSS after churn", setting, after.rss_mib, "MiB", "before churn", before.rss_mib),
        Row(
            "cycle time p99, last tenth",
            setting,
            percentile(times[-tenth:], 0.99) * 1e3,
            "ms",
            "first tenth",
            percentile(times[:tenth], 0.99) * 1e3,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--cycles", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="300 cycles")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--fd-slack", type=int, default=2, help="descriptors the daemon may gain")
    parser.add_argument("--rss-slack", type=float, default=0.10, help="fraction of RSS the daemon may gain")
    args = parser.parse_args(argv)
    cycles = 300 if args.quick else args.cycles
    with gateway_daemon() as daemon:
        before, after, times, elapsed = asyncio.run(measure(daemon, cycles, args.concurrency))
    print(render(rows(before, after, times, cycles)))
    print(
        f"\n({cycles:,} cycles in {elapsed:.1f} s, {cycles / elapsed:,.0f}/s; "
        "ratios compare with a baseline from this same run)"
    )
    problems = []
    if after.fds > before.fds + args.fd_slack:
        problems.append(f"open descriptors grew from {before.fds} to {after.fds}")
    if after.rss_mib > before.rss_mib * (1 + args.rss_slack) + 4:
        problems.append(f"RSS grew from {before.rss_mib:.1f} MiB to {after.rss_mib:.1f} MiB")
    for problem in problems:
        print(f"LEAK: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
