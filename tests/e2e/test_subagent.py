"""Gateway tools through the real daemon: a sub-agent session answers for its parent, and the
spawned child appears under the parent in the session tree."""

from __future__ import annotations

import json

from gateway.client import GatewayClient
from tests.daemon import Daemon


async def test_session_spawn_runs_a_child_and_returns_its_answer(daemon: Daemon) -> None:
    args = json.dumps({"prompt": "count the files", "label": "helper"})
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        await client.call(
            "chat.send",
            {
                "sessionKey": "agent:main:main",
                "message": f"!tool session_spawn {args}",
                "idempotencyKey": "sp-1",
            },
        )
        outcome = await client.call("agent.wait", {"runId": "sp-1", "timeoutMs": 20_000})
        assert outcome["status"] == "ok", outcome
        assert outcome["text"] == "echo: echo: count the files"
        tree = await client.call("sessions.tree", {"key": "agent:main:main"})
        children = tree["root"]["children"]
        assert [c["kind"] for c in children] == ["subagent"]
        assert children[0]["label"] == "helper"
        child_history = await client.call("chat.history", {"sessionKey": children[0]["key"]})
        assert [m["role"] for m in child_history["messages"]] == ["user", "assistant"]


async def test_session_branch_tool_creates_a_branch(daemon: Daemon) -> None:
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        await client.call(
            "chat.send",
            {
                "sessionKey": "agent:main:main",
                "message": '!tool session_branch {"label": "alt"}',
                "idempotencyKey": "br-1",
            },
        )
        outcome = await client.call("agent.wait", {"runId": "br-1", "timeoutMs": 20_000})
        assert outcome["status"] == "ok", outcome
        tree = await client.call("sessions.tree", {"key": "agent:main:main"})
        assert [(c["kind"], c["label"]) for c in tree["root"]["children"]] == [("branch", "alt")]
