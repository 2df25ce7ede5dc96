"""The daemon starts, answers a chat over WebSocket and stops gracefully."""

from __future__ import annotations

from gateway.client import GatewayClient
from tests.daemon import Daemon


async def test_chat_round_trip(daemon: Daemon) -> None:
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        answer = await client.call(
            "chat.send", {"sessionKey": "agent:main:main", "message": "hi there", "idempotencyKey": "smoke-1"}
        )
        assert answer == {"runId": "smoke-1", "status": "started"}
        outcome = await client.call("agent.wait", {"runId": "smoke-1", "timeoutMs": 10_000})
        assert outcome["status"] == "ok"
        assert outcome["text"] == "echo: hi there"
        history = await client.call("chat.history", {"sessionKey": "agent:main:main"})
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
    assert daemon.stop() == 0, daemon.logs()
