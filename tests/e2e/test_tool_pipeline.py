"""A session's tool pipeline is built for its first run and kept for the next ones
(`gateway.tools.factory`): what a kept pipeline must still do as a fresh one would, against the
real daemon. The workspace removed between two runs is there again when the next run starts, and
a reload that changes the agent's tools gives the same session's next run the new set."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from gateway.client import GatewayClient
from tests.daemon import running_daemon
from tests.reliability._support import connected, event_log, tool_message

KEY = "agent:main:pipeline"


async def _tool(
    client: GatewayClient, daemon: Any, idem: str, name: str, args: dict[str, Any]
) -> dict[str, Any]:
    """Make the model call tool `name` in a run of KEY; that run's `tool.finished` event."""
    params = {"sessionKey": KEY, "message": tool_message(name, args), "idempotencyKey": idem}
    assert (await client.call("chat.send", params))["status"] == "started"
    outcome = await client.call("agent.wait", {"runId": idem, "timeoutMs": 30_000}, timeout=35)
    assert outcome["status"] == "ok", outcome
    finished = [e for e in await event_log(daemon, KEY) if e["name"] == "tool.finished"]
    return finished[-1]


def _text(finished: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in finished["result"]["content"])


async def test_a_kept_pipeline_recreates_the_workspace_and_a_reload_replaces_it(gateway_home: Path) -> None:
    with running_daemon(gateway_home, config="[runs]\n") as daemon:
        workspace = daemon.home / "workspaces" / "main"
        async with connected(daemon) as client:
            wrote = await _tool(client, daemon, "write", "write", {"path": "notes.txt", "content": "one"})
            assert not wrote["isError"], wrote
            assert (workspace / "notes.txt").read_text() == "one"

            shutil.rmtree(workspace)
            listed = await _tool(client, daemon, "ls-again", "ls", {})
            assert not listed["isError"], listed
            assert workspace.is_dir()

            (config_path,) = daemon.home.glob("gateway*.toml")
            config_path.write_text('[[agents]]\nid = "main"\ntools_deny = ["ls"]\n')
            await client.call("config.reload")
            denied = await _tool(client, daemon, "ls-denied", "ls", {})
            assert denied["isError"] and _text(denied) == "Tool ls not found", denied
