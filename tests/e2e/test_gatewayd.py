"""`gatewayd` as an operator meets it: start-up output, configuration, exit codes, HTTP probes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from gateway.client import GatewayClient
from tests.daemon import GATEWAYD, Daemon, start_daemon
from tests.e2e.helpers import MAIN, free_port, wait_for


def run_gatewayd(
    home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 20.0
) -> subprocess.CompletedProcess[str]:
    """Run gatewayd expecting it to exit on its own (start-up failures)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("GATEWAY_TOKEN", "GATEWAY_CONFIG")}
    full_env.update({"GATEWAY_HOME": str(home), "GATEWAY_MODEL": "faux/echo", **(env or {})})
    return subprocess.run(
        [*GATEWAYD, *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=str(home.parent),
    )


def output(daemon: Daemon) -> str:
    return daemon.out_path.read_text()


async def test_start_up_probes_lock_and_restart(gateway_home: Path) -> None:
    daemon = start_daemon(gateway_home)
    try:
        text = output(daemon)
        token_file = gateway_home / "token"
        assert f"listening on {daemon.url}" in text
        assert f"dashboard: {daemon.http_url}/ui/" in text
        assert "model: faux/echo" in text
        assert f"generated a new auth token in {token_file}" in text
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert len(daemon.token) >= 32

        async with httpx.AsyncClient(base_url=daemon.http_url) as http:
            health = await http.get("/health")
            ready = await http.get("/readyz")
        assert health.status_code == 200 and health.json()["ok"] is True
        assert ready.status_code == 200 and ready.json() == {"ready": True}

        for path in ("", "ws"):
            async with GatewayClient(daemon.url + path, token=daemon.token) as client:
                assert client.hello["type"] == "hello-ok"
                assert (await client.call("health"))["ok"] is True
        # At info the log has no line per connection, and no uvicorn colour copies of messages.
        log = daemon.err_path.read_text()
        assert '"WebSocket /" [accepted]' not in log and "connection open" not in log
        assert "color_message" not in log

        # A second daemon on the same state directory refuses to start.
        second = run_gatewayd(gateway_home, "--port", "0")
        assert second.returncode == 1
        assert f"the state directory {gateway_home} is in use by process {daemon.proc.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert daemon.proc.poll() is None
    finally:
        assert daemon.stop() == 0, daemon.logs()

    again = start_daemon(gateway_home, tag="b")
    try:
        assert again.token == daemon.token
        assert f"using the auth token in {gateway_home / 'token'}" in output(again)
    finally:
        assert again.stop() == 0, again.logs()


async def test_without_a_model_it_starts_explains_and_runs_fail_with_that_message(gateway_home: Path) -> None:
    daemon = start_daemon(gateway_home, model=None)
    try:
        text = output(daemon)
        warning = next(line for line in text.splitlines() if line.startswith("warning: "))
        assert "GATEWAY_MODEL" in warning
        help_text = warning.removeprefix("warning: ").split("; runs will fail")[0]
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            assert client.hello["snapshot"]["sessionDefaults"]["modelConfigured"] is False
            await client.call("chat.send", {"sessionKey": MAIN, "message": "hi", "idempotencyKey": "nm-1"})
            outcome = await client.call("agent.wait", {"runId": "nm-1", "timeoutMs": 10_000})
        assert outcome["status"] == "error"
        assert outcome["errorMessage"] == help_text
    finally:
        assert daemon.stop() == 0, daemon.logs()


async def test_config_flag_env_and_file_precedence(gateway_home: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    file_port = taken.getsockname()[1]
    env_file = gateway_home / "env.toml"
    env_file.write_text("[gateway]\ntick_interval_ms = 1111\n")
    config = (
        f"[gateway]\nport = {file_port}\ntick_interval_ms = 2222\n"
        '[agent_defaults]\nmodel = "openai/gpt-4o-mini"\n'
    )
    # --config beats GATEWAY_CONFIG; GATEWAY_MODEL beats the file; --port beats the file.
    daemon = start_daemon(gateway_home, config=config, env={"GATEWAY_CONFIG": str(env_file)})
    try:
        assert daemon.port != file_port
        assert "model: faux/echo" in output(daemon)
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            assert client.hello["policy"]["tickIntervalMs"] == 2222
            got = await client.call("config.get")
        assert got["path"] == str(gateway_home / "gateway.toml")
        assert got["config"]["agent_defaults"]["model"] == "faux/echo"
    finally:
        taken.close()
        assert daemon.stop() == 0, daemon.logs()

    # Without --config, GATEWAY_CONFIG names the file.
    daemon = start_daemon(gateway_home, env={"GATEWAY_CONFIG": str(env_file)}, tag="env")
    try:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            assert client.hello["policy"]["tickIntervalMs"] == 1111
    finally:
        assert daemon.stop() == 0, daemon.logs()


async def test_ctrl_c_says_what_it_waits_for_and_a_second_one_stops_at_once(gateway_home: Path) -> None:
    key = "agent:main:ctrl-c"
    daemon = start_daemon(gateway_home, config="[gateway]\nshutdown_grace_s = 120\n")
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        await client.call("sessions.create", {"key": key})
        await client.call("sessions.events.subscribe", {"key": key})
        endless = {"sessionKey": key, "message": "!long 100000", "idempotencyKey": "cc-1"}
        await client.call("chat.send", endless)
        # Every word a client has seen is durable: the next start keeps it in the cut-off reply.
        await wait_for(
            client,
            lambda e: e["event"] == "session.message.delta" and e["payload"]["delta"].strip() == "w20",
        )

        daemon.proc.send_signal(signal.SIGINT)
        said = await _stderr_line(daemon, "gatewayd: stopping")
        assert said == (
            "gatewayd: stopping: waiting up to 120 s for 1 run in flight to finish (press Ctrl-C again "
            "to stop at once; the next start then closes it as after a crash)"
        )
        daemon.proc.send_signal(signal.SIGINT)
        # Far sooner than the 120 s grace the run would otherwise get.
        assert await asyncio.to_thread(daemon.proc.wait, 30) == 130
    assert "gatewayd: stopping now without waiting" in daemon.err_path.read_text()
    assert "Traceback" not in daemon.logs()

    again = start_daemon(gateway_home, tag="again")
    try:
        async with GatewayClient(again.url, token=again.token) as client:
            history = await client.call("chat.history", {"sessionKey": key})
            assert history["sessionInfo"]["status"] == "interrupted"
            last = history["messages"][-1]
            assert last["role"] == "assistant" and last["stopReason"] == "aborted"
            assert last["content"][0]["text"].startswith(" ".join(f"w{n}" for n in range(1, 21)))
            outcome = await client.call("agent.wait", {"runId": "cc-1", "timeoutMs": 1000})
            assert outcome["status"] == "aborted"
    finally:
        assert again.stop() == 0, again.logs()


async def _stderr_line(daemon: Daemon, prefix: str, timeout: float = 15.0) -> str:
    """The first line of the daemon's stderr that starts with `prefix`, once it is there."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for line in daemon.err_path.read_text().splitlines():
            if line.startswith(prefix):
                return line
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {prefix!r} line on stderr:\n{daemon.logs()}")


@pytest.mark.parametrize(
    ("body", "key"),
    [("[runs]\nmax_concurrent = 0\n", "runs.max_concurrent"), ("[gateway]\nbogus = 1\n", "gateway.bogus")],
)
def test_bad_config_file_exits_2_with_one_line(gateway_home: Path, body: str, key: str) -> None:
    path = gateway_home / "bad.toml"
    path.write_text(body)
    result = run_gatewayd(gateway_home, "--port", "0", "--config", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert key in lines[0] and str(path) in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_a_wrong_type_in_the_file_is_reported_even_when_a_flag_overrides_the_key(gateway_home: Path) -> None:
    path = gateway_home / "typo.toml"
    path.write_text('[gateway]\nport = "eighty"\n')
    result = run_gatewayd(gateway_home, "--port", "0", "--config", str(path))
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "gateway.port" in line and str(path) in line, line
    assert "listening on" not in result.stdout


def test_port_in_use_exits_1(gateway_home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_gatewayd(gateway_home, "--port", str(port))
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_refuses_a_non_loopback_address_without_auth(gateway_home: Path) -> None:
    result = run_gatewayd(gateway_home, "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in result.stderr
    assert "listening on" not in result.stdout
    assert "Traceback" not in result.stderr


def test_an_unusable_database_exits_1(gateway_home: Path) -> None:
    (gateway_home / "isdir.db").mkdir()
    url = f"sqlite:///{gateway_home / 'isdir.db'}"
    result = run_gatewayd(gateway_home, "--port", "0", env={"GATEWAY_DATABASE_URL": url})
    assert result.returncode == 1
    assert "gatewayd: could not start: database error" in result.stderr
    assert "listening on" not in result.stdout


NOT_AT_START_UP = (
    "alembic",  # migrations: only when the schema is behind
    "mako",
    "rich",  # the console log renderer: only on a terminal
    "pygments",
    "sqlalchemy.orm",  # the store uses SQLAlchemy Core only
    "sqlalchemy.dialects.postgresql",  # only for a PostgreSQL URL
    "asyncpg",
    "bindings",  # chat channels: only when [bindings] configures one
    "httpx",  # the LLM providers' and the channels' HTTP client: only with the first request
    "jsonschema",  # tool arguments: only with the first tool call
    "cryptography",  # device signatures: only when a device connects
    "tree_sitter",  # the shell grammar: only with the first bash command
    "tree_sitter_bash",
    "gateway.sandbox.exec_mediation",  # exec mediation: with the first run's tools
    "agent_core.providers.anthropic",  # an HTTP model API: with the first run of one of its models
    "agent_core.providers.google",
    "agent_core.providers.openai_completions",
    "agent_core.providers.openai_responses",
    "partial_json_parser",
    "prometheus_client",  # metrics: only with the first scrape
    "opentelemetry",  # traces: only when an OTLP endpoint is set
    "google.protobuf",
)
"""Modules a daemon with the default configuration (SQLite, no bindings, logs to a file) does not
import to start and answer a first handshake."""

NOT_FOR_A_RUN = ("gateway.approvals.layer", "gateway.approvals.policy")
"""Modules a first run does not import when no agent's approval policy asks (the default)."""

_STARTED_IN_PROCESS = textwrap.dedent(
    """
    import asyncio, gc, json, os, signal, sys, threading, time
    from gateway.cli import gatewayd
    from gateway.client import GatewayClient

    url, token, report = sys.argv[1:4]

    async def first_handshake():
        deadline = time.monotonic() + 60
        while True:
            try:
                async with GatewayClient(url, token=token) as client:
                    return client.hello["type"]
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.02)

    async def one_run():
        async with GatewayClient(url, token=token) as client:
            sent = await client.call("chat.send", {"sessionKey": "agent:main:probe", "message": "hi",
                                                   "idempotencyKey": "probe-1"})
            done = await client.call("agent.wait", {"runId": sent["runId"], "timeoutMs": 30000})
            return done["status"]

    def watch():
        hello = asyncio.run(first_handshake())
        modules = sorted(sys.modules)
        run = asyncio.run(one_run())
        # The socket listens before uvicorn reports that it started, so the first handshake can
        # be answered a moment before the daemon turns the collector back on.
        deadline = time.monotonic() + 10
        while not gc.isenabled() and time.monotonic() < deadline:
            time.sleep(0.01)
        state = {"hello": hello, "modules": modules, "gc_enabled": gc.isenabled(),
                 "gc_frozen": gc.get_freeze_count(), "run": run, "after_run": sorted(sys.modules)}
        with open(report, "w") as out:
            json.dump(state, out)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()
    sys.exit(gatewayd.main(sys.argv[4:]))
    """
)


def test_a_default_start_imports_only_what_the_configuration_uses(gateway_home: Path) -> None:
    # The first start creates and migrates the database (that one needs the migration tooling).
    first = start_daemon(gateway_home)
    assert first.stop() == 0, first.logs()
    port = free_port()
    token = "t" * 32
    report = gateway_home / "modules.json"
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_CONFIG"}
    env.update({"GATEWAY_HOME": str(gateway_home), "GATEWAY_MODEL": "faux/echo", "GATEWAY_TOKEN": token})
    child = [sys.executable, "-c", _STARTED_IN_PROCESS, f"ws://127.0.0.1:{port}/", token, str(report)]
    done = subprocess.run(
        [*child, "--port", str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        cwd=str(gateway_home),
    )
    assert done.returncode == 0, done.stderr[-5000:]
    state = json.loads(report.read_text())
    assert state["hello"] == "hello-ok"
    unwanted = [name for name in state["modules"] if _within(name, NOT_AT_START_UP)]
    assert unwanted == []
    # A run of an agent whose policy never asks leaves the approval machinery unimported.
    assert state["run"] == "ok"
    assert [name for name in state["after_run"] if _within(name, NOT_FOR_A_RUN)] == []
    # The collector is back on once the server listens, with start-up's objects frozen out of it.
    assert state["gc_enabled"] is True
    assert state["gc_frozen"] > 10_000


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)
