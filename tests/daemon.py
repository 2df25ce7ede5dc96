"""Start the real `gatewayd` as a subprocess on a free loopback port, for end-to-end tests.

    daemon = start_daemon(home, model="faux/echo")
    ... GatewayClient(daemon.url, token=daemon.token) ...
    daemon.stop()            # SIGTERM and wait (graceful)
    daemon.kill()            # SIGKILL (crash)

Each daemon gets the test's temporary GATEWAY_HOME; its stdout/stderr go to files in that home so
a failing test can show them (`daemon.logs()`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

GATEWAYD = [sys.executable, "-m", "gateway.cli.gatewayd"]
_LISTEN = re.compile(r"listening on ws://(?P<host>[^/]+)/")


@dataclass
class Daemon:
    home: Path
    proc: subprocess.Popen[bytes]
    url: str
    http_url: str
    token: str
    out_path: Path
    err_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].rstrip("/"))

    def logs(self) -> str:
        out = self.out_path.read_text(errors="replace") if self.out_path.exists() else ""
        err = self.err_path.read_text(errors="replace") if self.err_path.exists() else ""
        return f"--- stdout ---\n{out}\n--- stderr ---\n{err[-20000:]}"

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def start_daemon(
    home: Path,
    *,
    model: str | None = "faux/echo",
    env: Mapping[str, str] | None = None,
    args: list[str] | None = None,
    config: str | None = None,
    timeout: float = 30.0,
    port: int = 0,
    tag: str = "",
) -> Daemon:
    """Start gatewayd with `home` as its state directory; returns once it listens."""
    home.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(
        {
            "GATEWAY_HOME": str(home),
            "GATEWAY_LOG_LEVEL": full_env.get("GATEWAY_TEST_LOG_LEVEL", "info"),
            "PYTHONUNBUFFERED": "1",
            "GATEWAY_FAUX_PACE_MS": full_env.get("GATEWAY_FAUX_PACE_MS", "5"),
        }
    )
    full_env.pop("GATEWAY_TOKEN", None)
    if model is not None:
        full_env["GATEWAY_MODEL"] = model
    else:
        full_env.pop("GATEWAY_MODEL", None)
    if env:
        full_env.update(env)
    command = [*GATEWAYD, "--port", str(port)]
    if config is not None:
        config_path = home / f"gateway{tag}.toml"
        config_path.write_text(config)
        command += ["--config", str(config_path)]
    command += args or []
    stamp = f"{tag}{int(time.time() * 1000)}"
    out_path = home / f"daemon-{stamp}.out"
    err_path = home / f"daemon-{stamp}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, env=full_env, cwd=str(home))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = out_path.read_text(errors="replace")
        match = _LISTEN.search(text)
        if match:
            host = match.group("host")
            token_file = home / "token"
            token = full_env.get("GATEWAY_TOKEN") or (
                token_file.read_text().strip() if token_file.exists() else ""
            )
            return Daemon(
                home=home,
                proc=proc,
                url=f"ws://{host}/",
                http_url=f"http://{host}",
                token=token,
                out_path=out_path,
                err_path=err_path,
                env=full_env,
            )
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    err_text = err_path.read_text(errors="replace")
    raise RuntimeError(f"gatewayd did not start (exit {proc.returncode}):\n{text}\n{err_text[-5000:]}")


@contextmanager
def running_daemon(home: Path, **kwargs: object) -> Iterator[Daemon]:
    daemon = start_daemon(home, **kwargs)  # type: ignore[arg-type]
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def daemon(gateway_home: Path) -> Iterator[Daemon]:
    """A running gatewayd on faux/echo with this test's temporary home."""
    with running_daemon(gateway_home) as running:
        yield running
