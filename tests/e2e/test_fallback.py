"""An agent's fallback chain and rotating keys, through the real daemon and real HTTP servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import GatewayClient
from tests.agent_core.providers.llm_server import LLMServer, Reply, sse, status
from tests.daemon import running_daemon
from tests.e2e.helpers import is_run_end, wait_for


def answer(text: str) -> Reply:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}
    usage = {"prompt_tokens": 12, "completion_tokens": 3}
    finish = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
    return sse(f"data: {json.dumps(chunk)}\n\n", f"data: {json.dumps(finish)}\n\n", "data: [DONE]\n\n")


def config(primary: str, backup: str, *, keys: str = "") -> str:
    return f"""
[agent_defaults]
model = "primary/gpt-p"
fallbacks = ["backup/gpt-b"]

[providers.primary]
base_url = "{primary}/v1"
{keys}

[providers.backup]
base_url = "{backup}/v1"

[[models]]
provider = "primary"
id = "gpt-p"
api = "openai-completions"
context_window = 32000
max_tokens = 1024

[[models]]
provider = "backup"
id = "gpt-b"
api = "openai-completions"
context_window = 32000
max_tokens = 1024
"""


@pytest.fixture
async def servers() -> AsyncIterator[tuple[LLMServer, LLMServer]]:
    primary, backup = LLMServer(), LLMServer()
    await primary.start()
    await backup.start()
    try:
        yield primary, backup
    finally:
        await primary.aclose()
        await backup.aclose()


def _text(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


async def send(client: GatewayClient, key: str, text: str, run_id: str) -> dict[str, Any]:
    await client.call("chat.send", {"sessionKey": key, "message": text, "idempotencyKey": run_id})
    outcome: dict[str, Any] = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 20_000})
    return outcome


async def test_a_stopped_primary_is_replaced_by_the_fallback_mid_conversation(
    gateway_home: Path, servers: tuple[LLMServer, LLMServer]
) -> None:
    primary, backup = servers
    primary.script(answer("hello from primary"))
    # An unknown fallback is left out of the chain (with a warning), the next one answers.
    cfg = config(primary.base_url, backup.base_url).replace(
        '["backup/gpt-b"]', '["nowhere/none", "backup/gpt-b"]'
    )
    with running_daemon(gateway_home, model=None, config=cfg) as daemon:
        async with GatewayClient(daemon.url, token=daemon.token, caps=(), client_id="cli") as client:
            first = await send(client, "agent:main:main", "hi", "fb-1")
            assert (first["status"], first["text"]) == ("ok", "hello from primary")

            await primary.aclose()  # the primary provider goes away between two turns
            backup.script(answer("hello from backup"))
            seen: list[dict[str, Any]] = []
            second = await send(client, "agent:main:main", "still there?", "fb-2")
            assert (second["status"], second["text"]) == ("ok", "hello from backup")
            step = await wait_for(
                client,
                lambda e: (
                    e["event"] == "agent"
                    and e["payload"]["runId"] == "fb-2"
                    and e["payload"]["data"].get("phase") == "fallback_step"
                ),
                into=seen,
            )
            data = step["payload"]["data"]
            assert (data["provider"], data["model"], data["from"], data["to"], data["reason"]) == (
                "backup",
                "gpt-b",
                "primary/gpt-p",
                "backup/gpt-b",
                "overloaded",
            )
            assert data["error"].startswith("Connection error")

            history = await client.call("chat.history", {"sessionKey": "agent:main:main"})
            replies = [m for m in history["messages"] if m["role"] == "assistant"]
            assert [(m["provider"], m["model"]) for m in replies] == [
                ("primary", "gpt-p"),
                ("backup", "gpt-b"),
            ]
            assert "diagnostics" not in replies[0]
            assert replies[1]["diagnostics"]["fallback"]["from"] == "primary/gpt-p"
        async with GatewayClient(daemon.url, token=daemon.token) as native:
            await native.call("sessions.events.subscribe", {"key": "agent:main:main", "afterSeq": 0})
            replayed: list[dict[str, Any]] = []
            await wait_for(native, is_run_end("fb-2"), into=replayed)
            completed = [
                e["payload"]["message"]
                for e in replayed
                if e["event"] == "session.message.completed"
                and e["payload"]["message"]["role"] == "assistant"
            ]
            assert completed[-1]["model"] == "gpt-b"
            assert completed[-1]["diagnostics"]["fallback"]["reason"] == "overloaded"
        logs = daemon.logs()
    # The backup saw the whole conversation, the primary's earlier reply included.
    sent = [_text(m["content"]) for m in backup.requests[0].json["messages"] if m["role"] != "system"]
    assert sent == ["hi", "hello from primary", "still there?"]
    assert "model fallback" in logs and "primary/gpt-p" in logs
    assert "fallback model cannot be used" in logs and "nowhere/none" in logs


async def test_a_rejected_key_rests_and_the_next_key_answers(
    gateway_home: Path, servers: tuple[LLMServer, LLMServer]
) -> None:
    primary, backup = servers
    keys = 'api_keys = ["sk-revoked-0001", "sk-valid-0002"]'
    primary.script(
        status(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}),
        answer("answered with the second key"),
        answer("second turn"),
    )
    cfg = config(primary.base_url, backup.base_url, keys=keys)
    with running_daemon(gateway_home, model=None, config=cfg) as daemon:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            first = await send(client, "agent:main:keys", "hi", "key-1")
            assert (first["status"], first["text"]) == ("ok", "answered with the second key")
            second = await send(client, "agent:main:keys", "again", "key-2")
            assert second["text"] == "second turn"
        logs = daemon.logs()
    used = [r.headers.get("authorization") for r in primary.requests]
    # The revoked key is tried once, then rests: the next turn goes straight to the valid one.
    assert used == ["Bearer sk-revoked-0001", "Bearer sk-valid-0002", "Bearer sk-valid-0002"]
    assert backup.requests == []
    assert "API key rested" in logs and "…0001" in logs and "sk-revoked-0001" not in logs


async def test_compaction_summaries_use_the_agents_compaction_model(
    gateway_home: Path, servers: tuple[LLMServer, LLMServer]
) -> None:
    chat, cheap = servers
    cfg = config(chat.base_url, cheap.base_url).replace(
        'fallbacks = ["backup/gpt-b"]', 'fallbacks = []\ncompaction_model = "backup/gpt-b"'
    )
    cfg += "\n[compaction]\nkeep_recent_tokens = 1\n"
    chat.script(answer("first answer " * 20), answer("second answer " * 20))
    cheap.script(answer("## Goal\nsummary written by the cheap model"))
    with running_daemon(gateway_home, model=None, config=cfg) as daemon:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            await send(client, "agent:main:compact", "tell me things " * 20, "c-1")
            await send(client, "agent:main:compact", "and more " * 20, "c-2")
            result = await client.call("sessions.compact", {"key": "agent:main:compact"}, timeout=60)
    assert "cheap model" in json.dumps(result)
    assert len(chat.requests) == 2  # the conversation's model wrote no summary
    summary_request = cheap.requests[0].json
    assert summary_request["model"] == "gpt-b"
    assert "tell me things" in json.dumps(summary_request["messages"])
