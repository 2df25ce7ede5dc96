"""`gatewayctl models list` and `gatewayctl usage` as subprocesses against the real daemon, whose
agents talk to loopback servers that report token usage like the real APIs."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError, GatewayClient
from tests.agent_core.providers.llm_server import LLMServer, Reply, sse
from tests.daemon import Daemon, running_daemon

CTL = [sys.executable, "-m", "gateway.cli.gatewayctl"]


def answer(text: str, prompt: int, completion: int) -> Reply:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    finish = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
    return sse(f"data: {json.dumps(chunk)}\n\n", f"data: {json.dumps(finish)}\n\n", "data: [DONE]\n\n")


def config(base_url: str) -> str:
    return f"""
[agent_defaults]
model = "local/priced"

[providers.local]
base_url = "{base_url}/v1"

[providers.anthropic]
api_keys = ["sk-ant-one", "sk-ant-two"]

[[models]]
provider = "local"
id = "priced"
api = "openai-completions"
context_window = 64000
max_tokens = 2048
cost = {{ input = 2.0, output = 10.0 }}

[[agents]]
id = "main"

[[agents]]
id = "helper"
"""


def ctl(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_URL=daemon.url, GATEWAY_TOKEN=daemon.token, PYTHONUNBUFFERED="1")
    done = subprocess.run([*CTL, *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert "Traceback" not in done.stdout + done.stderr, done
    return done


@pytest.fixture
async def server() -> AsyncIterator[LLMServer]:
    llm = LLMServer()
    await llm.start()
    try:
        yield llm
    finally:
        await llm.aclose()


async def say(client: GatewayClient, key: str, text: str, run_id: str) -> dict[str, Any]:
    await client.call("chat.send", {"sessionKey": key, "message": text, "idempotencyKey": run_id})
    outcome: dict[str, Any] = await client.call("agent.wait", {"runId": run_id, "timeoutMs": 20_000})
    return outcome


async def test_models_list_shows_prices_windows_and_keys(gateway_home: Path, server: LLMServer) -> None:
    env = {"OPENAI_API_KEY": "sk-openai", "ANTHROPIC_API_KEY": "", "GEMINI_API_KEY": "", "GOOGLE_API_KEY": ""}
    with running_daemon(gateway_home, model=None, config=config(server.base_url), env=env) as daemon:
        listed = ctl(daemon, "models", "list", "--json")
        assert listed.returncode == 0, listed
        models = {m["ref"]: m for m in json.loads(listed.stdout)["models"]}
        priced = models["local/priced"]
        assert (priced["contextWindow"], priced["cost"]["input"], priced["cost"]["output"]) == (
            64000,
            2.0,
            10.0,
        )
        assert (priced["keys"], priced["keyless"]) == (0, True)
        assert models["openai/gpt-4.1"]["keys"] == 1
        assert models["anthropic/claude-sonnet-4-5"]["keys"] == 2
        assert models["google/gemini-2.5-flash"]["api"] == "google-generative-ai"
        assert models["google/gemini-2.5-flash"]["keys"] == 0

        human = ctl(daemon, "models", "list", "--provider", "google")
        assert human.returncode == 0, human
        assert "google/gemini-2.5-pro" in human.stdout and "none" in human.stdout
        assert "openai/" not in human.stdout


async def test_usage_sums_tokens_and_cost_per_agent_and_day(gateway_home: Path, server: LLMServer) -> None:
    server.script(answer("one", 1000, 100), answer("two", 3000, 200), answer("three", 500, 50))
    with running_daemon(gateway_home, model=None, config=config(server.base_url)) as daemon:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            assert (await say(client, "agent:main:main", "a", "u-1"))["status"] == "ok"
            assert (await say(client, "agent:main:main", "b", "u-2"))["status"] == "ok"
            assert (await say(client, "agent:helper:main", "c", "u-3"))["status"] == "ok"
            direct = await client.call("usage.summary", {"days": 1, "agentId": "helper"})
            assert [(r["agentId"], r["runs"], r["totalTokens"]) for r in direct["usage"]] == [
                ("helper", 1, 550)
            ]
            with pytest.raises(CallError) as refused:
                await client.call("usage.summary", {"days": 400})
            assert refused.value.code == "INVALID_REQUEST"

        done = ctl(daemon, "usage", "--json", "--days", "7")
        assert done.returncode == 0, done
        rows = json.loads(done.stdout)["usage"]
        today = dt.datetime.now(dt.UTC).date().isoformat()
        by_agent = {row["agentId"]: row for row in rows}
        assert {row["day"] for row in rows} == {today}
        main, helper = by_agent["main"], by_agent["helper"]
        assert (main["runs"], main["input"], main["output"]) == (2, 4000, 300)
        # 4000 input tokens at $2/M and 300 output tokens at $10/M.
        assert main["cost"] == pytest.approx(4000 * 2 / 1e6 + 300 * 10 / 1e6)
        assert (helper["runs"], helper["input"], helper["output"]) == (1, 500, 50)

        only = json.loads(ctl(daemon, "usage", "--json", "--agent", "helper").stdout)["usage"]
        assert [row["agentId"] for row in only] == ["helper"]

        human = ctl(daemon, "usage")
        assert human.returncode == 0 and "main" in human.stdout and "4,000" in human.stdout
        assert "0.0110" in human.stdout  # main's cost: $0.008 + $0.003
