"""Fan-out: one session streaming M deltas to N subscribed clients, beside a bare `websockets`
broadcast server sending the same frames to the same N clients.

    .venv/bin/python -m bench.fanout                  # N = 1, 10, 100, 1000, 3 rounds each
    .venv/bin/python -m bench.fanout --quick          # N = 1, 10 with small M, one round
    .venv/bin/python -m bench.fanout --profile DIR    # also write a cProfile of the daemon to DIR

Gateway side: one real `gatewayd` (faux/echo, `GATEWAY_FAUX_PACE_MS=0`, log level warning) in a
temporary home, with a session of its own per N. N clients (raw WebSocket clients from
`bench._wire`, in processes of at most 250 clients) connect, complete the handshake with cap
`session-scoped-events` and call `sessions.events.subscribe {key}`. One `chat.send` of `!long M`
starts a run. Every client receives 3M + 13 frames (each delta arrives as `session.message.delta`,
`agent` and `chat`; the rest are the run's lifecycle events) and stops at the final
`session.status.changed` idle.

Baseline: a subprocess running `websockets.asyncio.server.serve` that, once the same N clients
(same client code) are connected, sends the exact frames one gateway client received, in order,
each with one `websockets.broadcast` call followed by a yield to the event loop.

Gateway and bare rounds alternate (both sides stay connected); each row shows the medians and,
as its ratio, the median of the per-round gateway/bare ratios. Rows per N:

- deliveries per second: frames received by all clients / time from the first receipt to the
  last (`time.monotonic()`, one clock for all processes on Linux);
- server CPU per delivery: the server process's CPU time (user + system, all threads) from the
  trigger to the last receipt, read from its CPU clock (ns; psutil's 10 ms ticks are too coarse
  for the baseline's short runs). For the gateway it covers the whole run: faux model, agent
  loop, journal commits to SQLite, rendering and fan-out;
- client CPU per delivery, to show the clients are not what limits the rate. They share the
  machine's cores with the server, so on a 2-core machine a high value can still slow it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._daemon import HOST, Daemon, cpu_seconds, gateway_daemon
from bench._report import Row, median, render
from bench._wire import WireClient, open_many

SESSION_KEY = "agent:main:bench-fanout"
END_PREFIX = b'{"type":"event","event":"session.status.changed"'
CLIENTS_PER_WORKER = 250
RUN_TIMEOUT_S = 180.0
ROUNDS = 3


@dataclass(frozen=True)
class Plan:
    clients: int
    deltas: int

    @property
    def frames_per_client(self) -> int:
        return 3 * self.deltas + 13


@dataclass(frozen=True)
class Outcome:
    deliveries: int
    seconds: float
    cpu_s: float
    client_cpu_s: float
    complete: bool
    lost: int

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds > 0 else float("nan")

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.deliveries * 1e6 if self.deliveries else float("nan")

    @property
    def client_cpu_us(self) -> float:
        return self.client_cpu_s / self.deliveries * 1e6 if self.deliveries else float("nan")


# --- client worker processes --------------------------------------------------------------------


class Tally:
    """What one client received in one round: counted per frame, stamped per TCP read."""

    __slots__ = ("count", "done", "first", "first_seq", "last", "last_seq", "on_done", "record")

    def __init__(self, on_done: asyncio.Event, record: list[bytes] | None) -> None:
        self.on_done = on_done
        self.record = record
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.first_seq = 0
        self.last_seq = 0
        self.done = False

    def __call__(self, payload: bytes, now: float) -> None:
        if not self.count:
            self.first = now
            self.first_seq = _seq(payload)
        self.count += 1
        self.last = now
        if self.record is not None:
            self.record.append(payload)
        if payload.startswith(END_PREFIX) and b'"status":"idle"' in payload:
            self.done = True
            self.last_seq = _seq(payload)
            self.on_done.set()

    @property
    def lost(self) -> int:
        """Frames the server numbered for this client but never delivered (seq gaps)."""
        return self.last_seq - self.first_seq + 1 - self.count if self.done else 0


def _seq(payload: bytes) -> int:
    at = payload.rfind(b'"seq":')
    return int(payload[at + 6 : -1]) if at >= 0 else 0


async def _count_round(tallies: list[Tally], finished: asyncio.Event, timeout: float) -> dict[str, Any]:
    cpu_at_ready = time.process_time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        finished.clear()
        if all(t.done for t in tallies):
            break
        try:
            await asyncio.wait_for(finished.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            break
    seen = [t for t in tallies if t.count]
    return {
        "received": sum(t.count for t in tallies),
        "first": min((t.first for t in seen), default=0.0),
        "last": max((t.last for t in seen), default=0.0),
        "done": sum(1 for t in tallies if t.done),
        "lost": sum(t.lost for t in tallies),
        "cpu": time.process_time() - cpu_at_ready,
    }


async def _worker(spec: dict[str, Any]) -> None:
    """One client process: connect `count` clients, then per round: print `ready`, count until
    every client saw the end (or the timeout), print one JSON line of totals; the next round
    starts when a line arrives on stdin, and the process ends at EOF."""
    clients = await open_many(HOST, spec["port"], spec["count"])
    if spec["mode"] == "gateway":

        async def join(client: WireClient) -> None:
            await client.gateway_connect(spec["token"])
            await client.request("sessions.events.subscribe", {"key": spec["key"]})

        await asyncio.gather(*(join(c) for c in clients))
    finished = asyncio.Event()
    record: list[bytes] | None = [] if spec.get("record") else None
    tallies = [Tally(finished, record if i == 0 else None) for i in range(len(clients))]
    for client, tally in zip(clients, tallies, strict=True):
        client.on_event = tally
    loop = asyncio.get_running_loop()
    for round_index in itertools.count():
        for tally in tallies:
            tally.reset()
        print("ready", flush=True)
        result = await _count_round(tallies, finished, spec["timeout"])
        if record is not None and round_index == 0:
            Path(spec["record"]).write_bytes(b"\n".join(record) + b"\n")
            tallies[0].record = record = None
        print(json.dumps(result), flush=True)
        if not await loop.run_in_executor(None, sys.stdin.readline):
            break
    for client in clients:
        client.close()


class Workers:
    """The client processes of one side (gateway or bare) of one configuration."""

    def __init__(self, spec: dict[str, Any], clients: int) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.clients = clients
        left, index = clients, 0
        while left:
            share = min(left, CLIENTS_PER_WORKER)
            one = dict(spec, count=share, record=spec.get("record") if index == 0 else None)
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bench.fanout", "--worker", json.dumps(one)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            left -= share
            index += 1

    def _lines(self) -> list[str]:
        out = []
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"a client worker exited ({proc.wait()})")
            out.append(line)
        return out

    def wait_ready(self) -> None:
        for line in self._lines():
            if line.strip() != "ready":
                raise RuntimeError(f"a client worker said {line!r} instead of ready")

    def results(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._lines()]

    def next_round(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("next\n")
            proc.stdin.flush()
        self.wait_ready()

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _outcome(results: list[dict[str, Any]], cpu_s: float, clients: int) -> Outcome:
    seen = [r for r in results if r["received"]]
    first = min((r["first"] for r in seen), default=0.0)
    last = max((r["last"] for r in seen), default=0.0)
    return Outcome(
        deliveries=sum(r["received"] for r in results),
        seconds=last - first,
        cpu_s=cpu_s,
        client_cpu_s=sum(r["cpu"] for r in results),
        complete=sum(r["done"] for r in results) == clients,
        lost=sum(r["lost"] for r in results),
    )


def _round(workers: Workers, pid: int, trigger: Callable[[], None]) -> Outcome:
    before = cpu_seconds(pid)
    trigger()
    results = workers.results()
    return _outcome(results, cpu_seconds(pid) - before, workers.clients)


# --- the gateway side ---------------------------------------------------------------------------


class GatewaySide:
    """A daemon, one control connection and N subscribed clients, reused for every round."""

    def __init__(self, daemon: Daemon, plan: Plan, record: Path) -> None:
        self.daemon = daemon
        self.plan = plan
        self.key = f"{SESSION_KEY}-n{plan.clients}"
        self.loop = asyncio.new_event_loop()
        self.control = self.loop.run_until_complete(self._control())
        spec = {
            "mode": "gateway",
            "port": daemon.port,
            "token": daemon.token,
            "key": self.key,
            "timeout": RUN_TIMEOUT_S,
            "record": str(record),
        }
        self.workers = Workers(spec, plan.clients)
        self.runs = 0

    async def _control(self) -> WireClient:
        client = await WireClient.open(self.daemon.host, self.daemon.port)
        await client.gateway_connect(self.daemon.token)
        await client.request("sessions.create", {"key": self.key})
        return client

    def _send(self) -> None:
        self.runs += 1
        params = {
            "sessionKey": self.key,
            "message": f"!long {self.plan.deltas}",
            "idempotencyKey": f"{self.key}-{self.runs}",
        }
        self.loop.run_until_complete(self.control.request("chat.send", params))

    def measure(self) -> Outcome:
        outcome = _round(self.workers, self.daemon.pid, self._send)
        # The run's last frames are out; wait for it to be idle before the next round starts.
        self.loop.run_until_complete(
            self.control.request("agent.wait", {"runId": f"{self.key}-{self.runs}", "timeoutMs": 30_000})
        )
        return outcome

    def close(self) -> None:
        self.workers.close()
        self.control.close()
        self.loop.close()


# --- the baseline: bare websockets broadcast ------------------------------------------------------


async def _bare_server() -> None:
    """Serve on a free loopback port (printed as `port N`). Each stdin line `go N FILE`: wait for
    N connections, send every line of FILE as one text frame to all of them (one
    `websockets.broadcast` per frame, then a yield), print `sent`. Exits at EOF."""
    import websockets
    from websockets.asyncio.server import ServerConnection, serve

    connections: set[ServerConnection] = set()

    async def handler(ws: ServerConnection) -> None:
        connections.add(ws)
        try:
            await ws.wait_closed()
        finally:
            connections.discard(ws)

    loop = asyncio.get_running_loop()
    async with serve(handler, HOST, 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"port {port}", flush=True)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            _, expected, path = line.split(maxsplit=2)
            frames = Path(path.strip()).read_text(encoding="utf-8").splitlines()
            deadline = time.monotonic() + 30
            while len(connections) < int(expected) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for frame in frames:
                websockets.broadcast(connections, frame)
                await asyncio.sleep(0)
            print("sent", flush=True)


class BareSide:
    def __init__(self, plan: Plan, record: Path) -> None:
        self.plan = plan
        self.record = record
        self.server = subprocess.Popen(
            [sys.executable, "-m", "bench.fanout", "--bare-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.server.stdout is not None
        port = int(self.server.stdout.readline().split()[1])
        self.workers = Workers({"mode": "bare", "port": port, "timeout": RUN_TIMEOUT_S}, plan.clients)

    def _go(self) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write(f"go {self.plan.clients} {self.record}\n")
        self.server.stdin.flush()

    def measure(self) -> Outcome:
        outcome = _round(self.workers, self.server.pid, self._go)
        assert self.server.stdout is not None
        self.server.stdout.readline()  # "sent"
        return outcome

    def close(self) -> None:
        self.workers.close()
        if self.server.stdin is not None:
            self.server.stdin.close()
        try:
            self.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


# --- the table ----------------------------------------------------------------------------------


def _note(outcomes: list[Outcome]) -> str:
    if all(o.complete and not o.lost for o in outcomes):
        return ""
    if all(o.complete for o in outcomes):
        return f" [{sum(o.lost for o in outcomes)} lost]"
    return " [timed out]"


def measure(daemon: Daemon, plan: Plan, rounds: int) -> list[Row]:
    """`rounds` alternating gateway and bare rounds for one configuration (a session of its own
    in `daemon`, and a bare server of its own)."""
    gateway: list[Outcome] = []
    bare: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as tmp:
        record = Path(tmp) / "frames.jsonl"
        gateway_side = GatewaySide(daemon, plan, record)
        bare_side: BareSide | None = None
        try:
            gateway_side.workers.wait_ready()
            bare_side = BareSide(plan, record)
            bare_side.workers.wait_ready()
            for index in range(rounds):
                if index:
                    gateway_side.workers.next_round()
                    bare_side.workers.next_round()
                gateway.append(gateway_side.measure())
                bare.append(bare_side.measure())
        finally:
            gateway_side.close()
            if bare_side is not None:
                bare_side.close()
    setting = f"N={plan.clients:,}, M={plan.deltas:,}"
    return [
        Row(
            f"deliveries/s ({plan.frames_per_client:,} frames/client){_note(gateway)}",
            setting,
            median([o.rate for o in gateway]),
            "/s",
            f"bare broadcast{_note(bare)}",
            median([o.rate for o in bare]),
            median([g.rate / b.rate for g, b in zip(gateway, bare, strict=True)]),
        ),
        Row(
            "server CPU per delivery",
            setting,
            median([o.cpu_us for o in gateway]),
            "µs",
            "bare broadcast",
            median([o.cpu_us for o in bare]),
            median([g.cpu_us / b.cpu_us for g, b in zip(gateway, bare, strict=True)]),
        ),
        Row(
            "client CPU per delivery (all client processes)",
            setting,
            median([o.client_cpu_us for o in gateway]),
            "µs",
            "bare broadcast",
            median([o.client_cpu_us for o in bare]),
        ),
    ]


def plans(quick: bool) -> list[Plan]:
    if quick:
        return [Plan(1, 100), Plan(10, 50)]
    return [Plan(1, 3000), Plan(10, 1000), Plan(100, 300), Plan(1000, 100)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 1 and 10 with small runs")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="write a cProfile of the daemon to DIR")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(_worker(json.loads(args.worker)))
        return
    if args.bare_server:
        asyncio.run(_bare_server())
        return
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows: list[Row] = []
    profile = args.profile / "gatewayd-fanout.prof" if args.profile else None
    largest = max(plan.clients for plan in plans(args.quick))
    # Every client connects before any authenticates, all from loopback: lift the per-address
    # quota of unauthenticated connections above N.
    config = f"[gateway]\nmax_unauthenticated_per_address = {max(128, largest + 16)}\n"
    with gateway_daemon(env={"GATEWAY_FAUX_PACE_MS": "0"}, config=config, profile=profile) as daemon:
        for plan in plans(args.quick):
            rows += measure(daemon, plan, 1 if args.quick else ROUNDS)
    print(render(rows))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


if __name__ == "__main__":
    main()
