"""`gatewayctl` end to end: the real CLI as a subprocess against a real gatewayd on faux/echo.

Most tests share one daemon (module scope, distinct session keys); the restart test runs its own.
Every invocation is checked for a traceback on either stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.ctl_sessions import POLL_AFTER_S
from gateway.client import GatewayClient, MessageTooBig
from tests.bindings.standins.discord import DiscordStandIn
from tests.daemon import Daemon, start_daemon

CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]
# Small enough that two short exchanges can be compacted; runs never get near the context window.
CONFIG = "[compaction]\nkeep_recent_tokens = 1\n"
SCRUBBED = (
    "GATEWAY_URL",
    "GATEWAY_TOKEN",
    "GATEWAY_PASSWORD",
    "GATEWAY_CONFIG",
    "GATEWAY_HOST",
    "GATEWAY_PORT",
)


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def _env(daemon: Daemon | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PYTHONUNBUFFERED"] = "1"
    if daemon is not None:
        env.update(GATEWAY_URL=daemon.url, GATEWAY_TOKEN=daemon.token)
    env.update(extra or {})
    return env


def _no_traceback(out: str, err: str) -> None:
    assert "Traceback" not in out and "Traceback" not in err, f"stdout:\n{out}\nstderr:\n{err}"


def ctl(*args: str, daemon: Daemon | None = None, env: dict[str, str] | None = None, stdin: str = "") -> Run:
    proc = subprocess.run(
        [*CTL, *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(daemon, env),
        timeout=60,
    )
    _no_traceback(proc.stdout, proc.stderr)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def ok_json(*args: str, daemon: Daemon) -> Any:
    run = ctl(*args, "--json", daemon=daemon)
    assert run.rc == 0, run
    return run.json()


async def _say(daemon: Daemon, key: str, message: str) -> dict[str, Any]:
    """Send `message` to `key` directly over the protocol (setup, not under test) and wait for
    the run's outcome."""
    async with GatewayClient(daemon.url, token=daemon.token, caps=()) as client:
        started = await client.call(
            "chat.send", {"sessionKey": key, "message": message, "idempotencyKey": os.urandom(8).hex()}
        )
        outcome: dict[str, Any] = await client.call(
            "agent.wait", {"runId": started["runId"], "timeoutMs": 20_000}
        )
        return outcome


def say(daemon: Daemon, key: str, message: str) -> dict[str, Any]:
    return asyncio.run(_say(daemon, key, message))


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("gatewayctl-home")
    with pytest.MonkeyPatch.context() as env:
        for name in SCRUBBED:
            env.delenv(name, raising=False)
        env.setenv("HOME", str(home))
        daemon = start_daemon(home, config=CONFIG)
    try:
        yield daemon
    finally:
        daemon.stop()


# No model, a small frame limit, and a token a shell user would have to quote: `-` first.
BARE_CONFIG = "[gateway]\nmax_payload = 65536\n"
DASH_TOKEN = "-dash-" + "t0ken" * 8


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("gatewayctl-bare")
    with pytest.MonkeyPatch.context() as env:
        for name in SCRUBBED:
            env.delenv(name, raising=False)
        env.setenv("HOME", str(home))
        daemon = start_daemon(home, model=None, config=BARE_CONFIG, env={"GATEWAY_TOKEN": DASH_TOKEN})
    try:
        yield daemon
    finally:
        daemon.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- gateway-wide commands ----------------------------------------------------------------------


def test_status_and_health(gw: Daemon) -> None:
    say(gw, "st-1", "hello")
    status = ok_json("status", daemon=gw)
    assert status["version"]
    assert status["uptimeMs"] > 0
    assert status["connections"] >= 1  # this very connection
    assert status["liveSessions"] >= 1
    assert status["runsInFlight"] == 0
    assert isinstance(status["queueDepths"], dict)
    assert status["channels"] == []
    assert status["database"]["sizeBytes"] > 0
    assert status["database"]["url"].startswith("sqlite")
    sandbox = status["sandbox"]
    assert sandbox["mode"] == "auto" and sandbox["runner"] in ("bwrap", "uid", "none")

    human = ctl("status", daemon=gw)
    assert human.rc == 0
    for label in ("uptime", "connections", "run(s) in flight", "queues", "database", "channels"):
        assert label in human.out
    line = next(row for row in human.out.splitlines() if row.startswith("sandbox"))
    if sandbox["runner"] == "none":
        assert "bash is refused" in line, line
    else:
        assert f"{sandbox['runner']} (mode auto, confined)" in line, line
    assert gw.url in human.out
    assert "\x1b[" not in human.out  # no colour codes into a pipe

    health = ok_json("health", daemon=gw)
    assert health["ok"] is True
    assert health["sessions"]["count"] >= 1
    assert ctl("health", daemon=gw).out.startswith("healthy")


def test_status_without_a_model_shows_the_hint_as_written_and_pipes_unpadded(bare: Daemon) -> None:
    status = ctl("status", daemon=bare)
    assert status.rc == 0, status
    model = next(line for line in status.out.splitlines() if line.startswith("model"))
    assert "`model` under [agent_defaults] in the config file" in model
    for args in (("status",), ("health",), ("sessions", "list"), ("config", "show")):
        piped = ctl(*args, daemon=bare)
        assert piped.rc == 0, piped
        padded = [line for line in piped.out.splitlines() if line != line.rstrip()]
        assert padded == [], (args, padded)


def test_a_message_over_the_frame_limit_is_one_line_naming_the_limit(bare: Daemon) -> None:
    big = "x" * 70_000
    refused = ctl("sessions", "send", "big-1", "-", daemon=bare, stdin=big)
    assert refused.rc == 1
    [line] = refused.err.strip().splitlines()
    assert "at most 65,536 bytes per frame" in line and "max_payload" in line, line
    assert "internal error" not in line and "Future exception" not in refused.err
    # Nothing reached the gateway: no session was made for it.
    assert ok_json("sessions", "list", "--search", "big-1", daemon=bare)["sessions"] == []


async def test_the_gateway_closes_an_oversize_frame_with_1009_and_the_client_says_so(bare: Daemon) -> None:
    """A client that does not know the limit (an older gateway's hello) sends the frame: the
    gateway closes with 1009, and the request fails with the gateway's reason, not a stray
    'Future exception was never retrieved'."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        client = GatewayClient(bare.url, token=bare.token)
        await client.connect()
        client.hello.pop("policy", None)
        with pytest.raises(MessageTooBig) as refused:
            params = {"sessionKey": "big-2", "message": "x" * 2_000_000, "idempotencyKey": "b2"}
            await client.call("chat.send", params)
        await client.aclose()
        assert client.close_code == 1009
        assert "exceeds limit of 65536 bytes" in str(refused.value)
        del client, refused
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unhandled == []


def test_a_token_that_starts_with_a_dash_can_be_given(bare: Daemon) -> None:
    url = {"GATEWAY_URL": bare.url}
    assert ctl("health", "--json", f"--token={DASH_TOKEN}", env=url).rc == 0
    assert ctl("--token", DASH_TOKEN, "health", "--json", env=url).rc == 0
    missing = ctl("health", "--token", env=url)
    assert missing.rc == 2 and "--token=VALUE" in missing.err


async def _ctl_json(*args: str, env: dict[str, str]) -> Any:
    rc, out, err = await _finish(await _spawn(*args, "--json", env=env))
    assert rc == 0, err
    return json.loads(out)


async def _poll(args: tuple[str, ...], env: dict[str, str], done: Any) -> Any:
    for _ in range(150):
        answer = await _ctl_json(*args, env=env)
        if done(answer):
            return answer
        await asyncio.sleep(0.1)
    raise AssertionError(f"gatewayctl {' '.join(args)} never got there: {answer}")


async def test_channels_status_and_pairing_with_a_discord_binding(gateway_home: Path) -> None:
    async with DiscordStandIn(heartbeat_interval_ms=500) as discord:
        discord.add_channel("600", type=1)  # a DM channel
        config = f'[bindings.discord.default]\napi_base_url = "{discord.api_base_url}"\n'
        env = {"DISCORD_BOT_TOKEN": "discord-test-token"}
        daemon = await asyncio.to_thread(start_daemon, gateway_home, config=config, env=env)
        try:
            ctl_env = _env(daemon)
            # READY and heartbeat ACKs are inbound frames.
            ready = await _poll(
                ("channels", "status"),
                ctl_env,
                lambda a: (
                    a["channels"]
                    and a["channels"][0]["state"] == "ready"
                    and a["channels"][0]["lastInboundAt"]
                ),
            )
            assert [row["id"] for row in ready["channels"]] == ["discord:default"]
            rc, out, _ = await _finish(await _spawn("status", env=ctl_env))
            assert rc == 0
            line = next(line for line in out.splitlines() if "discord:default" in line)
            assert "ready" in line and re.search(r"\d+ s ago", line), line
            assert (await _ctl_json("status", env=ctl_env))["channels"][0]["secondsSinceLastInbound"] < 5

            await discord.dispatch_message("600", "hello?", author_id="77", author_name="mallory")
            pending = await _poll(("pairing", "list"), ctl_env, lambda a: a["requests"])
            request = pending["requests"][0]
            assert (request["channel"], request["senderId"]) == ("discord", "77")
            rc, out, _ = await _finish(await _spawn("pairing", "list", env=ctl_env))
            assert rc == 0 and request["code"] in out and "mallory" in out
            wrong = await _finish(await _spawn("pairing", "approve", "slack", request["code"], env=ctl_env))
            assert wrong[0] == 1 and "no pending pairing request for slack" in wrong[2]
            approved = await _ctl_json("pairing", "approve", "discord", request["code"], env=ctl_env)
            assert approved["approved"]["senderId"] == "77"
            assert (await _ctl_json("pairing", "list", env=ctl_env))["requests"] == []
        finally:
            await asyncio.to_thread(daemon.stop)


def test_config_and_call(gw: Daemon) -> None:
    shown = ok_json("config", "show", daemon=gw)
    assert shown["path"] == str(gw.home / "gateway.toml")
    assert shown["config"]["gateway"]["home"] == str(gw.home)
    assert shown["config"]["compaction"]["keep_recent_tokens"] == 1
    assert ctl("config", "show", "gateway.home", daemon=gw).out.strip() == json.dumps(str(gw.home))
    human = ctl("config", "show", daemon=gw)
    assert "[compaction]" in human.out and "keep_recent_tokens = 1" in human.out
    missing = ctl("config", "show", "gateway.nope", daemon=gw)
    assert missing.rc == 1 and "no key 'gateway.nope'" in missing.err

    (gw.home / "gateway.toml").write_text(CONFIG + "[runs]\ncollect_window_ms = 1234\n")
    reloaded = ok_json("config", "reload", daemon=gw)
    assert "runs.collect_window_ms" in json.dumps(reloaded["changed"])
    assert ok_json("config", "show", "runs.collect_window_ms", daemon=gw)["value"] == 1234
    assert reloaded["restartRequired"] == []
    (gw.home / "gateway.toml").write_text(
        CONFIG + "[runs]\ncollect_window_ms = 1234\n[sandbox]\ntimeout_s = 60\n"
    )
    told = ctl("config", "reload", daemon=gw)
    assert told.rc == 0 and "changed: sandbox.timeout_s" in told.out
    assert "taking effect after a restart: sandbox.timeout_s" in told.out
    refused = ctl("pairing", "approve", "NOPE42", "--json", daemon=gw)
    assert refused.rc == 1
    assert refused.json()["error"]["code"] == "NOT_FOUND"
    assert len(refused.err.strip().splitlines()) == 1

    commands = {c["name"] for c in ok_json("call", "commands.list", daemon=gw)["commands"]}
    assert {"status", "model", "think"} <= commands
    final = ok_json(
        "call",
        "agent",
        "--expect-final",
        "--params",
        json.dumps({"message": "via agent", "idempotencyKey": "ctl-agent-1", "sessionKey": "call-1"}),
        daemon=gw,
    )
    assert final["status"] == "ok" and final["text"] == "echo: via agent"
    unknown = ctl("call", "no.such.method", daemon=gw)
    assert unknown.rc == 1 and "unknown method: no.such.method" in unknown.err


# --- sessions -----------------------------------------------------------------------------------


def test_new_list_show_tree_branch_switch(gw: Daemon) -> None:
    created = ok_json("sessions", "new", "life-1", "--label", "first life", daemon=gw)
    assert created["key"] == "life-1" and created["session"]["label"] == "first life"
    say(gw, "life-1", "one two")
    say(gw, "life-1", '!tool ls {"path": "."}')

    listed = ok_json("sessions", "list", "--search", "life-", daemon=gw)
    assert [row["key"] for row in listed["sessions"]] == ["life-1"]
    assert listed["sessions"][0]["label"] == "first life"
    assert (
        ok_json("sessions", "list", "--search", "life-", "--status", "running", daemon=gw)["sessions"] == []
    )
    assert ctl("sessions", "list", "--search", "life-", daemon=gw).out.count("life-1") == 1

    history = ok_json("sessions", "show", "life-1", daemon=gw)
    roles = [m["role"] for m in history["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "toolResult", "assistant"]
    shown = ctl("sessions", "show", "life-1", daemon=gw).out
    assert "▌ user" in shown and "echo: one two" in shown
    assert '→ ls {"path": "."}' in shown and "ls ok" in shown and "tokens" in shown

    first_reply = history["messages"][1]["__gateway"]["id"]
    branch = ok_json(
        "sessions", "branch", "life-1", "--at", first_reply, "--key", "life-1b", "--label", "alt", daemon=gw
    )["session"]
    assert branch["key"] == "life-1b" and branch["branchPoint"] == first_reply
    assert branch["parentId"] == created["sessionId"]
    bogus = ctl("sessions", "branch", "life-1", "--at", "bogus", daemon=gw)
    assert bogus.rc == 1 and "`gatewayctl sessions show life-1`" in bogus.err, bogus
    auto = ok_json("sessions", "branch", "life-1", daemon=gw)["session"]
    assert auto["key"].startswith("life-1:branch:")

    tree = ok_json("sessions", "tree", "life-1b", daemon=gw)["root"]
    assert tree["key"] == "life-1"
    assert sorted(child["key"] for child in tree["children"]) == sorted(["life-1b", auto["key"]])
    assert "◀" in ctl("sessions", "tree", "life-1b", daemon=gw).out

    # The branch sees the parent's history up to the fork point only.
    branch_history = ok_json("sessions", "show", "life-1b", daemon=gw)["messages"]
    assert [m["role"] for m in branch_history] == ["user", "assistant"]

    switched = ok_json("sessions", "switch", "life-1", branch["sessionId"], daemon=gw)
    assert switched["session"]["sessionId"] == branch["sessionId"]
    assert ok_json("sessions", "show", "life-1", daemon=gw)["sessionId"] == branch["sessionId"]


def test_reset_compact_rm(gw: Daemon) -> None:
    say(gw, "rc-1", "first message here")
    say(gw, "rc-1", "second message")
    compacted = ok_json("sessions", "compact", "rc-1", daemon=gw)
    assert compacted["compacted"] is True and compacted["tokensBefore"] > 0
    assert compacted["firstKeptEntryId"]

    before = ok_json("sessions", "show", "rc-1", daemon=gw)["sessionId"]
    reset = ok_json("sessions", "reset", "rc-1", daemon=gw)
    assert reset["previousSessionId"] == before and reset["sessionId"] != before
    assert ok_json("sessions", "show", "rc-1", daemon=gw)["messages"] == []
    archived = ok_json("sessions", "list", "--search", before, "--all", daemon=gw)["sessions"]
    assert [row["status"] for row in archived] == ["archived"]

    say(gw, "rm-1", "hi")
    ok_json("sessions", "branch", "rm-1", "--key", "rm-1b", daemon=gw)
    refused = ctl("sessions", "rm", "rm-1", daemon=gw)
    assert refused.rc == 1 and "--cascade" in refused.err
    deleted = ok_json("sessions", "rm", "rm-1", "--cascade", daemon=gw)
    assert deleted["deleted"] is True
    assert ok_json("sessions", "list", "--search", "rm-1", "--all", daemon=gw)["sessions"] == []
    gone = ctl("sessions", "show", "rm-1b", daemon=gw)
    assert gone.rc == 1 and "sessions list" in gone.err


def test_send_json_outcomes_and_exit_codes(gw: Daemon) -> None:
    done = ok_json("sessions", "send", "send-1", "hello world", daemon=gw)
    assert done["status"] == "ok" and done["text"] == "echo: hello world"
    assert done["sessionKey"] == "send-1" and done["terminationReason"] == "no_tool_calls"

    tool = ok_json("sessions", "send", "send-1", '!tool ls {"path": "."}', daemon=gw)
    assert [(c["toolName"], c["isError"]) for c in tool["toolCalls"]] == [("ls", False)]
    assert tool["text"] == "echo: (empty directory)"

    failed = ctl("sessions", "send", "send-1", "!error boom", "--json", daemon=gw)
    assert failed.rc == 1
    assert failed.json()["status"] == "error" and failed.json()["errorMessage"] == "boom"
    human = ctl("sessions", "send", "send-1", "!error kaboom", daemon=gw)
    assert human.rc == 1 and "kaboom" in human.err

    piped = ctl("sessions", "send", "send-1", "-", daemon=gw, stdin="from stdin")
    assert piped.rc == 0 and piped.out == "echo: from stdin\n"
    assert "✓ done" in piped.err

    thought = ctl("sessions", "send", "send-1", "!think look before you leap", daemon=gw)
    assert thought.rc == 0 and thought.out == "echo: look before you leap\n"
    assert thought.err.startswith("thinking: look before you leap\n\n"), thought.err


def test_send_no_wait_queue_mode_and_abort(gw: Daemon) -> None:
    # Long enough to still be running when the next gatewayctl has started, even on a busy machine.
    started = ok_json("sessions", "send", "q-1", "!sleep 4000 first", "--no-wait", daemon=gw)
    assert started["status"] == "started"
    # A message sent while the run is busy joins it as a follow-up; send follows that run.
    joined = ctl("sessions", "send", "q-1", "second", "--queue-mode", "followup", "--json", daemon=gw)
    assert joined.rc == 0, joined
    assert joined.json()["runId"] == started["runId"]
    assert joined.json()["text"] == "echo: second"
    assert "q-1 is busy: your message will run as a follow-up when the run in flight ends" in joined.err

    sleeping = ok_json("sessions", "send", "q-1", "!sleep 20000 zzz", "--no-wait", daemon=gw)
    aborted = ok_json("sessions", "abort", "q-1", daemon=gw)
    assert aborted["aborted"] is True and aborted["runIds"] == [sleeping["runId"]]
    waited = ok_json(
        "call",
        "agent.wait",
        "--params",
        json.dumps({"runId": sleeping["runId"], "timeoutMs": 10_000}),
        daemon=gw,
    )
    assert waited["status"] == "aborted"
    assert "nothing to abort" in ctl("sessions", "abort", "q-1", daemon=gw).out


async def _spawn(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *CTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def _finish(proc: asyncio.subprocess.Process, timeout: float = 30) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    _no_traceback(out.decode(), err.decode())
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_send_streams_the_reply_before_it_exits(gw: Daemon) -> None:
    proc = await _spawn("sessions", "send", "stream-1", "!long 120", env=_env(gw))
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.read(8), 15)
    assert first.startswith(b"w1 ")
    assert proc.returncode is None  # text is on the terminal while the run is still going
    rc, rest, err = await _finish(proc)
    assert rc == 0, err
    words = (first.decode() + rest).split()
    assert words == [f"w{i}" for i in range(1, 121)]
    stored = ok_json("sessions", "show", "stream-1", daemon=gw)["messages"][-1]
    assert stored["content"][0]["text"].split() == words


# --- tail ---------------------------------------------------------------------------------------


async def _log(daemon: Daemon, key: str) -> list[tuple[int, str]]:
    """The session's whole event log, as the gateway stores it."""
    async with GatewayClient(daemon.url, token=daemon.token, caps=("session-scoped-events",)) as client:
        answer = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
        out: list[tuple[int, str]] = []
        while len(out) < answer["lastSeq"]:
            frame = await client.next_event(timeout=10)
            assert frame is not None
            if frame["event"].startswith("session."):
                out.append((frame["payload"]["sessionSeq"], frame["event"]))
        return out


async def _lines(proc: asyncio.subprocess.Process) -> AsyncIterator[dict[str, Any]]:
    assert proc.stdout is not None
    while line := await asyncio.wait_for(proc.stdout.readline(), 30):
        yield json.loads(line)


async def test_tail_follows_and_stops_when_idle(gw: Daemon) -> None:
    await _say(gw, "tail-1", "before")
    proc = await _spawn("sessions", "tail", "tail-1", "--from", "0", "--until-idle", "--json", env=_env(gw))
    seen: list[dict[str, Any]] = []
    async for frame in _lines(proc):
        seen.append(frame)
        if len(seen) == 3:  # the replay is under way: now start a run
            ok_json("sessions", "send", "tail-1", "after", "--no-wait", daemon=gw)
    rc, _, _ = await _finish(proc)
    assert rc == 0
    seqs = [f["payload"]["sessionSeq"] for f in seen]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [(f["payload"]["sessionSeq"], f["event"]) for f in seen] == await _log(gw, "tail-1")
    assert seen[-1]["event"] == "session.status.changed" and seen[-1]["payload"]["status"] == "idle"

    human = await _spawn("sessions", "tail", "tail-1", "--until-idle", env=_env(gw))
    await _subscribed(human, "tail-1")
    await _say(gw, "tail-1", "once more")
    rc, out, _ = await _finish(human)
    assert rc == 0
    lines = out.splitlines()
    assert any("message.completed" in line and '"echo: once more"' in line for line in lines)
    assert "status.changed" in lines[-1] and lines[-1].endswith("idle")


async def _subscribed(proc: asyncio.subprocess.Process, key: str) -> None:
    """Wait for tail's note that it follows `key` (printed once the subscription is answered)."""
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 15)
    assert line.startswith(f"following {key} ".encode()), line


class Cutter:
    """A loopback TCP relay in front of the gateway whose connections the test can drop at will."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Cutter:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.writers += [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


async def test_tail_resumes_after_the_connection_drops(gw: Daemon) -> None:
    ok_json("sessions", "new", "drop-1", daemon=gw)
    async with Cutter(gw.port) as cutter:
        env = _env(gw, {"GATEWAY_URL": f"ws://127.0.0.1:{cutter.port}/"})
        proc = await _spawn("sessions", "tail", "drop-1", "--from", "0", "--until-idle", "--json", env=env)
        await _subscribed(proc, "drop-1")
        ok_json("sessions", "send", "drop-1", "!long 200", "--no-wait", daemon=gw)
        seen: list[dict[str, Any]] = []
        async for frame in _lines(proc):
            seen.append(frame)
            if frame["event"] == "session.message.delta" and frame["payload"]["delta"] == "w20 ":
                cutter.cut()  # mid-stream: events keep coming while the tail is away
        rc, _, err = await _finish(proc)
    assert rc == 0, err
    assert "reconnected; resumed after event" in err
    log = await _log(gw, "drop-1")
    assert [(f["payload"]["sessionSeq"], f["event"]) for f in seen] == log
    assert [f["payload"]["sessionSeq"] for f in seen] == list(range(1, len(log) + 1))


class ClosedFor(Cutter):
    """A Cutter that, after `close_for(seconds)`, drops every new connection at once for that
    long (the gateway looks gone)."""

    refuse_until = 0.0

    def close_for(self, seconds: float) -> None:
        self.refuse_until = time.monotonic() + seconds
        self.cut()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self.refuse_until:
            writer.transport.abort()
            return
        await super()._relay(reader, writer)


async def test_send_prints_exactly_the_reply_when_it_ended_while_reconnecting(gw: Daemon) -> None:
    """The connection drops mid-reply and stays down longer than `sessions send` waits before
    asking `agent.wait`; the reply ends meanwhile. The replay after the reconnect is still shown:
    stdout is the stored reply, word for word."""
    async with ClosedFor(gw.port) as cutter:
        env = _env(gw, {"GATEWAY_URL": f"ws://127.0.0.1:{cutter.port}/"})
        proc = await _spawn("sessions", "send", "resume-send-1", "!long 80", env=env)
        assert proc.stdout is not None
        shown = b""
        while b"w20 " not in shown:
            shown += await asyncio.wait_for(proc.stdout.read(1), 15)
        cutter.close_for(POLL_AFTER_S + 0.5)
        rc, rest, err = await _finish(proc)
    assert rc == 0, err
    assert "reconnected; resumed after event" in err and "(replay: exact)" in err
    stored = ok_json("sessions", "show", "resume-send-1", daemon=gw)["messages"][-1]
    assert (shown.decode() + rest) == stored["content"][0]["text"] + "\n"
    assert re.search(r"✓ done · 1 turn · [\d,]+ tokens", err), err


async def test_tail_resumes_across_a_daemon_restart(gateway_home: Path) -> None:
    daemon = start_daemon(gateway_home)
    try:
        await _say(daemon, "restart-1", "before the restart")
        proc = await _spawn("sessions", "tail", "restart-1", "--from", "0", "--json", env=_env(daemon))
        seen: list[dict[str, Any]] = []
        restarted = False
        async for frame in _lines(proc):
            seen.append(frame)
            idle = frame["event"] == "session.status.changed" and frame["payload"]["status"] == "idle"
            if idle and not restarted:
                restarted = True
                assert daemon.stop() == 0, daemon.logs()
                daemon = start_daemon(gateway_home, port=daemon.port, tag="-2")
                # Runs at once, most likely before the tail is back: it must come as a replay.
                await _say(daemon, "restart-1", "after the restart")
            elif idle:
                proc.send_signal(signal.SIGINT)
        rc, _, err = await _finish(proc)
    finally:
        daemon.stop()
    assert rc == 0, err  # Ctrl-C is how one leaves tail
    assert "reconnected; resumed after event" in err
    texts = [
        f["payload"]["message"]["content"][0]["text"]
        for f in seen
        if f["event"] == "session.message.completed" and f["payload"]["message"]["role"] == "assistant"
    ]
    assert texts == ["echo: before the restart", "echo: after the restart"]
    seqs = [f["payload"]["sessionSeq"] for f in seen]
    assert seqs == list(range(1, len(seqs) + 1))


# --- finding the gateway, and failing well ------------------------------------------------------


def test_finds_the_local_gateway_and_its_token(gw: Daemon, tmp_path: Path) -> None:
    local = {"GATEWAY_HOME": str(gw.home), "GATEWAY_PORT": str(gw.port)}
    assert ctl("health", "--json", env=local).json()["ok"] is True

    config = tmp_path / "gateway.toml"
    config.write_text(f'[gateway]\nport = {gw.port}\ntoken = "{gw.token}"\n')
    from_config = ctl("health", "--json", env={"GATEWAY_CONFIG": str(config), "GATEWAY_HOME": str(tmp_path)})
    assert from_config.rc == 0, from_config

    nobody = ctl("status", env={"GATEWAY_HOME": str(tmp_path), "GATEWAY_PORT": str(gw.port)})
    assert nobody.rc == 4
    assert f"none in {tmp_path / 'token'}" in nobody.err

    flags = ctl("--url", f"127.0.0.1:{gw.port}", "--token", gw.token, "health", "--json")
    assert flags.rc == 0 and flags.json()["ok"] is True


def test_exit_codes_and_one_line_errors(gw: Daemon) -> None:
    for args in (["bogus"], ["sessions", "send", "k"], ["sessions", "list", "--limit", "0"], []):
        usage = ctl(*args, daemon=gw)
        assert usage.rc == 2, (args, usage)
        assert "--help" in usage.err
    bad_json = ctl("call", "health", "--params", "{nope", daemon=gw)
    assert bad_json.rc == 2 and "not valid JSON" in bad_json.err

    port = _free_port()
    down = ctl("status", env={"GATEWAY_URL": f"ws://127.0.0.1:{port}/", "GATEWAY_TOKEN": "x"})
    assert down.rc == 3
    assert down.err.strip() == (
        f"gatewayctl: error: cannot reach the gateway at ws://127.0.0.1:{port}/ — is gatewayd running? "
        "(start it with `make run` or `gatewayd`)"
    )
    down_json = ctl("status", "--json", env={"GATEWAY_URL": f"ws://127.0.0.1:{port}/"})
    assert down_json.rc == 3 and down_json.json()["error"]["exitCode"] == 3

    refused = ctl("sessions", "list", "--json", env={"GATEWAY_URL": gw.url, "GATEWAY_TOKEN": "wrong"})
    assert refused.rc == 4
    assert refused.json()["error"]["code"] == "AUTH_TOKEN_MISMATCH"
    assert len(refused.err.strip().splitlines()) == 1 and "refused the token" in refused.err


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli.ctl_parser import build_parser

    def walk(parser: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for action in parser._actions:
            if action.choices and isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])

    commands = list(walk(build_parser(), []))
    assert ["sessions", "tail"] in commands and ["pairing", "approve"] in commands
    assert ["tokens", "create"] in commands and ["tokens", "revoke"] in commands
    # Every command has its section in docs/gatewayctl.md (`### sessions tree KEY`, ...).
    docs = (Path(__file__).resolve().parents[2] / "docs" / "gatewayctl.md").read_text()
    headings = {line[4:].strip() for line in docs.splitlines() if line.startswith("### ")}
    undocumented = [
        name
        for name in (" ".join(path) for path in commands[1:])
        if not any(h == name or h.startswith(name + " ") for h in headings)
    ]
    # A command group (`sessions`, `cron`) has no section of its own: its commands do.
    groups = {" ".join(path[:-1]) for path in commands if len(path) > 1}
    missing = [c for c in undocumented if c not in groups]
    assert missing == [], "commands without a section in docs/gatewayctl.md"
    for path in commands:
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args([*path, "--help"])
        assert exit_info.value.code == 0
        assert capsys.readouterr().out.startswith("usage: gatewayctl")


async def test_send_reads_the_followed_session_last_seq_by_its_key(gw: Daemon) -> None:
    """`sessions send` asks for the session's last seq when a run ended without an event
    reaching it; the question names the session by key (and a key reset meanwhile ends the
    wait at what was shown)."""
    import io

    from gateway.cli.ctl_context import Ctl
    from gateway.cli.ctl_feed import SessionFeed
    from gateway.cli.ctl_follow import ResumeCursor
    from gateway.cli.ctl_output import Output
    from gateway.cli.ctl_sessions import _session_last_seq

    await _say(gw, "last-seq-1", "hello")
    out = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())
    ctl = Ctl(out, url=gw.url, token=gw.token)
    async with GatewayClient(gw.url, token=gw.token) as client:
        described = await client.call("sessions.describe", {"key": "last-seq-1"})
        cursor = ResumeCursor(session_id=described["sessionId"], last_seq=1)
        feed = SessionFeed(ctl, key="last-seq-1", cursor=cursor, client=client)
        assert await _session_last_seq(ctl, feed) == described["lastSeq"] > 1
        await client.call("sessions.reset", {"key": "last-seq-1"})
        assert await _session_last_seq(ctl, feed) == 1
