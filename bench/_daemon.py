"""Start the real `gatewayd` for a benchmark: a temporary home, a free loopback port, a known token.

    with gateway_daemon(env={"GATEWAY_FAUX_PACE_MS": "0"}) as daemon:
        ... WireClient.open(daemon.host, daemon.port) ... daemon.pid ...

The daemon is stopped with SIGTERM (SIGKILL after a grace period) and its home removed when the
block ends. Its stdout/stderr go to files in the home; `logs()` shows them when something fails.
With `profile=path`, the daemon runs under cProfile and writes its stats to `path` when it stops.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

HOST = "127.0.0.1"
GATEWAYD = ["-m", "gateway.cli.gatewayd"]


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    home: Path
    host: str
    port: int
    token: str
    started_at: float
    """`time.monotonic()` just before the process was spawned."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}/"

    def logs(self) -> str:
        parts = []
        for name in ("daemon.out", "daemon.err"):
            path = self.home / name
            if path.exists():
                parts.append(f"--- {name} ---\n{path.read_text(errors='replace')[-5000:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn(
    home: Path,
    *,
    env: Mapping[str, str] | None = None,
    config: str | None = None,
    profile: Path | None = None,
    token: str | None = None,
) -> Daemon:
    """Spawn gatewayd on a free loopback port with `home` as its state directory; returns at once
    (the caller waits for it to accept connections). `token` is the auth token (nodes of one
    cluster share theirs); a new random one when None."""
    port = free_port()
    token = token or secrets.token_urlsafe(24)
    full_env = dict(os.environ)
    for name in ("GATEWAY_CONFIG", "GATEWAY_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        full_env.pop(name, None)
    full_env.update(
        {
            "GATEWAY_HOME": str(home),
            "GATEWAY_HOST": HOST,
            "GATEWAY_PORT": str(port),
            "GATEWAY_TOKEN": token,
            "GATEWAY_MODEL": "faux/echo",
            "GATEWAY_LOG_LEVEL": "warning",
            "HOME": str(home),
            "PYTHONUNBUFFERED": "1",
        }
    )
    full_env.update(env or {})
    command = [sys.executable]
    if profile is not None:
        command += ["-m", "cProfile", "-o", str(profile)]
    command += GATEWAYD
    if config is not None:
        config_path = home / "bench.toml"
        config_path.write_text(config)
        command += ["--config", str(config_path)]
    with open(home / "daemon.out", "wb") as out, open(home / "daemon.err", "wb") as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            # One foreign call between fork and exec, with libc loaded beforehand.
            command,
            stdout=out,
            stderr=err,
            env=full_env,
            cwd=str(home),
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )
    return Daemon(proc=proc, home=home, host=HOST, port=port, token=token, started_at=started)


PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a child gets when its parent dies."""
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the benchmark process dies (a benchmark killed
    by its caller must not leave daemons behind). Linux only; elsewhere nothing. Strictly, the
    signal comes when the spawning *thread* ends: benchmarks spawn from their main thread."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_listening(daemon: Daemon, timeout: float = 30.0) -> None:
    """Block until the daemon prints its `listening on` line. Raises RuntimeError if it exits or
    does not get there within `timeout`."""
    out = daemon.home / "daemon.out"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "listening on ws://" in out.read_text(errors="replace"):
            return
        if daemon.proc.poll() is not None:
            break
        time.sleep(0.02)
    daemon.stop(timeout=5)
    raise RuntimeError(f"gatewayd did not start (exit {daemon.proc.returncode}):\n{daemon.logs()}")


@contextmanager
def gateway_daemon(
    *,
    env: Mapping[str, str] | None = None,
    config: str | None = None,
    profile: Path | None = None,
) -> Iterator[Daemon]:
    """A running gatewayd (faux/echo, log level warning) in a temporary home, stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        daemon = spawn(home, env=env, config=config, profile=profile)
        wait_listening(daemon)
        try:
            yield daemon
        finally:
            code = daemon.stop()
            if code not in (0, -signal.SIGTERM):
                print(f"warning: gatewayd exited with {code}\n{daemon.logs()}", file=sys.stderr)


def peak_rss_bytes(pid: int) -> int | None:
    """The process's high-water resident set size (Linux `VmHWM`), None where unavailable."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far.

    Read from the process's CPU clock (Linux `MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`, ns
    resolution); psutil's `cpu_times` (10 ms ticks, too coarse for short runs) where that fails.
    """
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, OverflowError):
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
