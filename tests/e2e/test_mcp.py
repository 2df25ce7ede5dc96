"""MCP servers through the real daemon: the FastMCP test server over stdio (in the agent's
bubblewrap sandbox) and over streamable HTTP, its tools called by the faux model with
`!tool notes__<tool> {...}`. Listing, arguments, an error, progress, a changed tool list, a
timeout, secrets, the deny list, a crash and the restart, `gatewayctl mcp`, and the documented
four-line example applied by `gatewayctl config reload`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.sandbox import SandboxMachine
from tests.daemon import Daemon, running_daemon, start_daemon
from tests.gateway.extensions.support import NOTES, PYTHON_PATHS, HttpNotes, free_port
from tests.reliability._support import connected, event_log, tool_message

pytestmark = pytest.mark.skipif(
    not SandboxMachine(home=Path("/nonexistent")).probe("bwrap").ok, reason="bubblewrap cannot run here"
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extensions.md"
CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]
SECRET = "notes-secret-from-the-environment"
PROVIDER_KEY = "sk-provider-key-that-must-not-leak"
AGENTS = """
[[agents]]
id = "main"

[[agents]]
id = "limited"
tools_deny = ["notes__add"]
"""


def toml_list(paths: list[str]) -> str:
    return "[" + ", ".join(json.dumps(path) for path in paths) + "]"


def stdio_config() -> str:
    return f"""
[[mcp_servers]]
name = "notes"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(NOTES))}, "stdio"]
read_only = {toml_list(PYTHON_PATHS)}
env = {{ NOTES_GREETING = "hello" }}
env_from = {{ NOTES_SECRET = "TEST_NOTES_SECRET" }}
timeout_s = 3
idle_timeout_s = 0
{AGENTS}"""


def http_config(url: str) -> str:
    return f"""
[[mcp_servers]]
name = "notes"
url = "{url}"
headers_from = {{ "X-Notes-Key" = "TEST_NOTES_SECRET" }}
timeout_s = 3
idle_timeout_s = 0
{AGENTS}"""


@dataclass
class Gateway:
    transport: str
    daemon: Daemon
    http: HttpNotes | None


@pytest.fixture(scope="module", params=["stdio", "http"])
def gw(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    home = tmp_path_factory.mktemp(f"mcp-{request.param}")
    http = None
    if request.param == "http":
        http = HttpNotes(free_port(), home / "notes-http.log")
        http.start()
        config = http_config(http.url)
    else:
        config = stdio_config()
    env = {"HOME": str(home / "user"), "TEST_NOTES_SECRET": SECRET, "OPENAI_API_KEY": PROVIDER_KEY}
    daemon = start_daemon(home / "state", config=config, env=env)
    try:
        yield Gateway(request.param, daemon, http)
    finally:
        daemon.stop()
        if http is not None:
            http.stop()


_runs = iter(range(1, 1_000_000))


@dataclass
class ToolRun:
    result: dict[str, Any]
    is_error: bool
    updates: list[dict[str, Any]]
    started: dict[str, Any]

    @property
    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.result.get("content", []))


async def call_tool(
    daemon: Daemon, tool: str, args: dict[str, Any], *, key: str = "agent:main:mcp"
) -> ToolRun:
    """Have the faux model call `tool` in session `key`; the run's tool events."""
    run_id = f"mcp-run-{next(_runs)}"
    async with connected(daemon) as client:
        params = {"sessionKey": key, "message": tool_message(tool, args), "idempotencyKey": run_id}
        assert (await client.call("chat.send", params))["status"] == "started"
        outcome = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 60_000}, timeout=70)
        assert outcome["status"] == "ok", outcome
    events = [event for event in await event_log(daemon, key) if event.get("runId") == run_id]
    finished = [event for event in events if event["name"] == "tool.finished"]
    assert len(finished) == 1, events
    started = next(event for event in events if event["name"] == "tool.started")
    updates = [event for event in events if event["name"] == "tool.updated"]
    return ToolRun(finished[0]["result"], finished[0]["isError"], updates, started)


async def mcp_rows(daemon: Daemon) -> list[dict[str, Any]]:
    async with connected(daemon) as client:
        rows: list[dict[str, Any]] = (await client.call("mcp.list"))["servers"]
        return rows


async def wait_ready(daemon: Daemon, timeout: float = 40.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        row = next(r for r in await mcp_rows(daemon) if r["agentId"] == "main")
        if row["state"] == "ready":
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"the server did not come back: {row}")
        time.sleep(0.2)


def ctl(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_URL=daemon.url, GATEWAY_TOKEN=daemon.token)
    done = subprocess.run([*CTL, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


# --- the tools ----------------------------------------------------------------------------------


async def test_the_tools_are_listed_and_called_with_coerced_arguments(gw: Gateway) -> None:
    run = await call_tool(gw.daemon, "notes__add", {"a": 2, "b": "3"})
    assert not run.is_error and run.text == "5"
    assert run.result["details"]["structuredContent"] == {"result": 5}
    # An ordinary tool event: the dashboard and every client show it like a built-in tool's.
    assert run.started["toolName"] == "notes__add"
    row = next(r for r in await mcp_rows(gw.daemon) if r["agentId"] == "main")
    assert row["state"] == "ready" and row["transport"] == gw.transport
    assert {"notes__add", "notes__fail", "notes__count", "notes__slow"} <= set(row["tools"])


async def test_arguments_that_do_not_fit_the_schema_never_reach_the_server(gw: Gateway) -> None:
    run = await call_tool(gw.daemon, "notes__add", {"a": "two", "b": 1})
    assert run.is_error and 'Validation failed for tool "notes__add"' in run.text


async def test_an_error_answer_is_an_error_result(gw: Gateway) -> None:
    run = await call_tool(gw.daemon, "notes__fail", {"message": "no such note"})
    assert run.is_error and "no such note" in run.text


async def test_progress_becomes_tool_updates(gw: Gateway) -> None:
    run = await call_tool(gw.daemon, "notes__count", {"steps": 3})
    assert run.text == "counted to 3"
    texts = ["".join(b["text"] for b in u["partialResult"]["content"]) for u in run.updates]
    assert texts == ["progress 1/3: step 1", "progress 2/3: step 2", "progress 3/3: step 3"]


async def test_a_changed_tool_list_is_picked_up_at_the_next_run(gw: Gateway) -> None:
    key = "agent:main:mcp-grow"
    missing = await call_tool(gw.daemon, "notes__extra", {}, key=key)
    assert missing.is_error and "notes__extra not found" in missing.text
    assert (await call_tool(gw.daemon, "notes__grow", {}, key=key)).text == "grown"
    found = await call_tool(gw.daemon, "notes__extra", {}, key=key)
    assert not found.is_error and found.text == "extra tool here"


async def test_a_changed_tool_list_is_picked_up_at_the_next_turn_of_the_same_run(gw: Gateway) -> None:
    """The server adds a tool while a run goes on; a message steered into that run calls it in
    the run's next turn."""
    key = "agent:main:mcp-turns"
    run_id = f"mcp-run-{next(_runs)}"
    async with connected(gw.daemon) as client:
        grow = tool_message("notes__grow", {"wait_s": 1.5})
        await client.call("chat.send", {"sessionKey": key, "message": grow, "idempotencyKey": run_id})
        await asyncio.sleep(0.5)  # the grow call is under way
        steer = {
            "sessionKey": key,
            "message": tool_message("notes__extra", {}),
            "idempotencyKey": f"{run_id}-steer",
            "queueMode": "steer",
        }
        assert (await client.call("chat.send", steer)).get("queued") == "steered"
        outcome = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 60_000}, timeout=70)
        assert outcome["status"] == "ok", outcome
    finished = [
        event
        for event in await event_log(gw.daemon, key)
        if event["name"] == "tool.finished" and event.get("runId") == run_id
    ]
    texts = ["".join(b.get("text", "") for b in e["result"]["content"]) for e in finished]
    assert texts == ["grown", "extra tool here"], finished


async def test_a_call_that_takes_too_long_times_out(gw: Gateway) -> None:
    run = await call_tool(gw.daemon, "notes__slow", {"seconds": 20})
    assert run.is_error and "did not answer within 3 s" in run.text
    assert (await call_tool(gw.daemon, "notes__add", {"a": 1, "b": 1})).text == "2"


async def test_secrets_reach_the_server_only_as_configured(gw: Gateway) -> None:
    if gw.transport == "stdio":
        assert (await call_tool(gw.daemon, "notes__env", {"name": "NOTES_SECRET"})).text == SECRET
        assert (await call_tool(gw.daemon, "notes__env", {"name": "NOTES_GREETING"})).text == "hello"
        assert (await call_tool(gw.daemon, "notes__env", {"name": "OPENAI_API_KEY"})).text == "(unset)"
    else:
        assert (await call_tool(gw.daemon, "notes__header", {"name": "x-notes-key"})).text == SECRET
    config = gw.daemon.home / "gateway.toml"
    assert SECRET not in config.read_text()


async def test_the_deny_list_takes_the_prefixed_name(gw: Gateway) -> None:
    denied = await call_tool(gw.daemon, "notes__add", {"a": 1, "b": 2}, key="agent:limited:mcp")
    assert denied.is_error and "notes__add not found" in denied.text
    allowed = await call_tool(gw.daemon, "notes__fail", {"message": "allowed"}, key="agent:limited:mcp")
    assert "allowed" in allowed.text


async def test_calls_are_audited(gw: Gateway) -> None:
    await call_tool(gw.daemon, "notes__add", {"a": 5, "b": 5})
    logs = gw.daemon.logs()
    assert "mcp.tool_call" in logs and "mcp.server_start" in logs
    assert SECRET not in logs


async def test_a_crashed_server_answers_an_error_and_is_restarted(gw: Gateway) -> None:
    before = next(r for r in await mcp_rows(gw.daemon) if r["agentId"] == "main")
    crashed = await call_tool(gw.daemon, "notes__crash", {})
    assert crashed.is_error and "MCP server notes" in crashed.text
    if gw.http is not None:
        assert gw.http.wait_exit() == 3
        gw.http.start()  # the service comes back on its own address
    row = await wait_ready(gw.daemon)
    assert row["restarts"] > before["restarts"]
    if gw.transport == "stdio":
        assert row["pid"] != before["pid"]
        log = Path(row["log"]).read_text()
        assert "crashing on purpose" in log
    assert (await call_tool(gw.daemon, "notes__add", {"a": 20, "b": 22})).text == "42"


async def test_gatewayctl_lists_and_restarts_servers(gw: Gateway) -> None:
    await call_tool(gw.daemon, "notes__add", {"a": 1, "b": 1})
    listed = ctl(gw.daemon, "mcp", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["servers"]
    assert {(r["agentId"], r["name"], r["state"]) for r in rows} >= {("main", "notes", "ready")}
    table = ctl(gw.daemon, "mcp", "list")
    assert "notes" in table.stdout and "ready" in table.stdout
    restarted = ctl(gw.daemon, "mcp", "restart", "notes", "--agent", "main", "--json")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    row = json.loads(restarted.stdout)["servers"][0]
    assert row["state"] == "ready" and row["restarts"] >= 1
    unknown = ctl(gw.daemon, "mcp", "restart", "nope")
    assert unknown.returncode == 1 and "no MCP server named 'nope'" in unknown.stderr
    async with connected(gw.daemon) as client:
        answer = await client.call("mcp.restart", {"name": "notes", "agentId": "main"})
    assert [(r["name"], r["state"]) for r in answer["servers"]] == [("notes", "ready")]
    assert answer["servers"][0]["restarts"] > row["restarts"]


# --- the documented example ----------------------------------------------------------------------


def doc_block(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```\w+\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/extensions.md has no {name} example"
    return match.group(1)


async def test_four_lines_of_toml_and_a_reload_give_the_agent_the_servers_tools(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    home = tmp_path_factory.mktemp("mcp-doc")
    four_lines = doc_block("mcp-config")
    assert len(four_lines.strip().splitlines()) == 4
    # The example's `python3` must be one with the SDK: this one, found first on PATH, and
    # visible inside the sandbox (the doc's `read_only` advice).
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = {
        "HOME": str(home / "user"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    with running_daemon(home / "state", config="", env=env) as daemon:
        workspace = daemon.home / "workspaces" / "main"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "notes_server.py").write_text(doc_block("mcp-server"))
        config = daemon.home / "gateway.toml"
        config.write_text(four_lines + f"read_only = {toml_list([*PYTHON_PATHS, str(bin_dir)])}\n")
        reloaded = ctl(daemon, "config", "reload")
        assert reloaded.returncode == 0, reloaded.stderr
        run = await call_tool(daemon, "notes__add_note", {"text": "the release is on Friday"})
        assert not run.is_error and run.text == "noted (1 so far)", run.text
        listed = await call_tool(daemon, "notes__list_notes", {})
        assert "the release is on Friday" in listed.text
        row = (await mcp_rows(daemon))[0]
        assert row["state"] == "ready" and row["runner"] == "bwrap"
        assert set(row["tools"]) == {"notes__add_note", "notes__list_notes"}
