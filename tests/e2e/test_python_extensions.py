"""Python extensions through the real daemon: a tiny distribution with an entry point (its
dist-info on the daemon's Python path) and the documented example dropped into
`<home>/extensions`. Pending and not imported until enabled; then the faux model calls their
tools; hooks that raise are logged and skipped; disabling withdraws them; every change records
who made it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import eventually
from tests.gateway.extensions.support import DIST
from tests.reliability._support import connected, event_log, tool_message

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extensions.md"
CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]


def doc_block(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```\w+\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/extensions.md has no {name} example"
    return match.group(1)


@dataclass
class Setup:
    daemon: Daemon
    marker: Path


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    home = tmp_path_factory.mktemp("extensions")
    state = home / "state"
    (state / "extensions").mkdir(parents=True)
    (state / "extensions" / "shout.py").write_text(doc_block("extension"))
    marker = home / "hello-imported"
    env = {
        "HOME": str(home / "user"),
        "PYTHONPATH": os.pathsep.join([str(DIST), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "HELLO_EXT_IMPORTED": str(marker),
    }
    daemon = start_daemon(state, env=env)
    try:
        yield Setup(daemon, marker)
    finally:
        daemon.stop()


_runs = iter(range(1, 1_000_000))


async def call_tool(
    daemon: Daemon, tool: str, args: dict[str, Any], *, key: str = "agent:main:ext"
) -> dict[str, Any]:
    """Have the faux model call `tool`; the run's `tool.finished` event (plus its updates)."""
    run_id = f"ext-run-{next(_runs)}"
    async with connected(daemon) as client:
        params = {"sessionKey": key, "message": tool_message(tool, args), "idempotencyKey": run_id}
        await client.call("chat.send", params)
        outcome = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 60_000}, timeout=70)
        assert outcome["status"] == "ok", outcome
    events = [event for event in await event_log(daemon, key) if event.get("runId") == run_id]
    finished = next(event for event in events if event["name"] == "tool.finished")
    finished["text"] = "".join(block.get("text", "") for block in finished["result"]["content"])
    finished["updates"] = [event for event in events if event["name"] == "tool.updated"]
    return finished


async def extensions(daemon: Daemon) -> dict[str, dict[str, Any]]:
    async with connected(daemon) as client:
        answer = await client.call("extensions.list")
    return {row["name"]: row for row in answer["extensions"]}


def ctl(daemon: Daemon, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_URL=daemon.url, GATEWAY_TOKEN=token or daemon.token)
    done = subprocess.run([*CTL, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


async def test_extensions_are_pending_and_not_imported_until_enabled(gw: Setup) -> None:
    found = await extensions(gw.daemon)
    assert found["hello"]["state"] == "pending" and not found["hello"]["loaded"]
    assert found["hello"]["origin"] == "entry point hello = hello_gateway_ext:register (hello-gateway-ext)"
    assert found["shout"]["state"] == "pending" and found["shout"]["origin"].endswith("extensions/shout.py")
    assert not gw.marker.exists()
    missing = await call_tool(gw.daemon, "hello", {"name": "Ada"})
    assert missing["isError"] and "Tool hello not found" in missing["text"]
    listed = ctl(gw.daemon, "extensions", "list")
    assert listed.returncode == 0 and "pending" in listed.stdout and "hello" in listed.stdout


async def test_enabled_extension_tools_run_and_raising_hooks_are_skipped(gw: Setup) -> None:
    enabled = ctl(gw.daemon, "extensions", "enable", "hello")
    assert enabled.returncode == 0, enabled.stdout + enabled.stderr
    assert "extension hello is enabled, loaded (hello, /hello)" in enabled.stdout
    assert gw.marker.read_text() == "imported\n"
    run = await call_tool(gw.daemon, "hello", {"name": "Ada"})
    # Its before_tool_call hook raised: logged, skipped, and the call went ahead.
    assert not run["isError"] and run["text"] == "hello, Ada (agent main)"
    updates = ["".join(b["text"] for b in u["partialResult"]["content"]) for u in run["updates"]]
    assert updates == ["looking up Ada"]
    # The hook runs around the built-in tools too, and its failure never reaches them.
    listing = await call_tool(gw.daemon, "ls", {})
    assert not listing["isError"]
    logs = gw.daemon.logs()
    assert "extension hook failed, skipped" in logs and "the hook fails on purpose" in logs
    assert "the message hook fails on purpose" in logs
    row = (await extensions(gw.daemon))["hello"]
    assert row["state"] == "enabled" and row["loaded"] and row["changedBy"].startswith("root credential (")
    assert "extensions.trust_changed" in logs
    # The daemon and other sessions carry on.
    async with connected(gw.daemon) as client:
        await client.call(
            "chat.send",
            {"sessionKey": "agent:main:other", "message": "still here", "idempotencyKey": "other-1"},
        )
        assert (await client.call("agent.wait", {"runId": "other-1", "timeoutMs": 30_000}))["status"] == "ok"


async def test_the_documented_extension_works_and_records_who_enabled_it(gw: Setup) -> None:
    async with connected(gw.daemon) as client:
        created = await client.call("tokens.create", {"name": "ops", "scopes": ["operator.admin"]})
    enabled = ctl(gw.daemon, "extensions", "enable", "shout", token=created["token"])
    assert enabled.returncode == 0, enabled.stdout + enabled.stderr
    row = (await extensions(gw.daemon))["shout"]
    assert row["changedBy"].startswith("token ops (") and row["tools"] == ["shout"]
    assert (await call_tool(gw.daemon, "shout", {"text": "hi"}, key="agent:main:shout"))["text"] == "HI!"
    refused = await call_tool(
        gw.daemon, "bash", {"command": "rm -rf /tmp/nothing-here"}, key="agent:main:shout"
    )
    assert refused["isError"] and "this gateway does not delete directories" in refused["text"]
    sent = ctl(gw.daemon, "sessions", "send", "agent:main:shout", "/shout hello")
    assert sent.returncode == 0 and "HELLO!" in sent.stdout, sent.stdout + sent.stderr


async def test_disabling_withdraws_the_tools_at_once(gw: Setup) -> None:
    ctl(gw.daemon, "extensions", "enable", "hello")
    disabled = ctl(gw.daemon, "extensions", "disable", "hello")
    assert disabled.returncode == 0 and "extension hello is disabled" in disabled.stdout
    run = await call_tool(gw.daemon, "hello", {"name": "Ada"})
    assert run["isError"] and "Tool hello not found" in run["text"]
    row = (await extensions(gw.daemon))["hello"]
    assert row["state"] == "disabled" and not row["loaded"]
    # The method itself, as any client calls it: the answer is the extension's new row.
    ctl(gw.daemon, "extensions", "enable", "hello")
    async with connected(gw.daemon) as client:
        answer = await client.call("extensions.disable", {"name": "hello"})
    assert answer["extension"]["state"] == "disabled" and not answer["extension"]["loaded"]


async def test_only_admins_change_trust_and_unknown_names_are_refused(gw: Setup) -> None:
    async with connected(gw.daemon, scopes=("operator.read", "operator.write")) as client:
        with pytest.raises(CallError) as forbidden:
            await client.call("extensions.enable", {"name": "hello"})
        assert forbidden.value.code == "FORBIDDEN"
    unknown = ctl(gw.daemon, "extensions", "enable", "ghost")
    assert unknown.returncode == 1 and "no extension named 'ghost'" in unknown.stderr


async def test_hooks_see_runs_of_every_session(gw: Setup) -> None:
    ctl(gw.daemon, "extensions", "enable", "shout")
    await call_tool(gw.daemon, "shout", {"text": "x"}, key="agent:main:hooks")

    async def told() -> bool:
        lines = gw.daemon.logs().splitlines()
        return any("run ended" in line and "agent:main:hooks" in line for line in lines)

    # Run hooks are told after the fact, by their own worker.
    await eventually(told)
