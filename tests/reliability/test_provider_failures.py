"""A real provider (`openai/gpt-4o-mini`) pointed at a local scripted server that fails the way
LLM APIs fail. Every run must end with a recorded reason (`agent.wait` status, terminationReason,
errorMessage, the same in the event log) and leave no session `running`.

The scripted server (`tests.agent_core.providers.llm_server`) runs on its own event loop in a
thread, so one daemon and one server serve the whole module; each test scripts its replies and
uses its own session.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.agent_core.providers.llm_server import LLMServer, Reply, sse, status
from tests.daemon import Daemon, start_daemon
from tests.reliability._support import connected, event_log, history, text_of

IDLE_TIMEOUT_S = 2.0
DONE = "data: [DONE]\n\n"


def chunk(content: str | None = None, finish: str | None = None) -> str:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


class ThreadedServer:
    """`LLMServer` on an event loop of its own thread, usable from any test's loop."""

    def __init__(self) -> None:
        self.server = LLMServer()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="llm-server", daemon=True)

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def script(self, *replies: Reply) -> int:
        """Queue replies; returns how many requests the server had seen before them."""
        seen = len(self.server.requests)
        done = threading.Event()

        def add() -> None:
            self.server.replies.clear()
            self.server.script(*replies)
            done.set()

        self.loop.call_soon_threadsafe(add)
        done.wait(5)
        return seen

    def requests_since(self, seen: int) -> int:
        return len(self.server.requests) - seen

    def times_since(self, seen: int) -> list[float]:
        return self.server.request_times[seen:]


@dataclass
class Setup:
    daemon: Daemon
    llm: ThreadedServer
    dead_port: int


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    llm = ThreadedServer()
    llm.start()
    # A port bound but not listening: connections to it are refused, and nobody else can take it.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    config = f"""
[runs]
idle_timeout_s = {IDLE_TIMEOUT_S}

[providers.openai]
base_url = "{llm.server.base_url}/v1"

[providers.deadend]
base_url = "http://127.0.0.1:{dead_port}/v1"
"""
    home = tmp_path_factory.mktemp("provider-failures")
    daemon = start_daemon(home, model="openai/gpt-4o-mini", env={"OPENAI_API_KEY": "test"}, config=config)
    try:
        yield Setup(daemon, llm, dead_port)
    finally:
        daemon.stop()
        llm.stop()
        dead.close()


async def _run(setup: Setup, key: str, *, model: str | None = None) -> tuple[dict[str, Any], float]:
    """Send one message in a new session and wait for its outcome; checks that the outcome is
    recorded the same way everywhere and that no session stays running."""
    async with connected(setup.daemon) as client:
        await client.call("sessions.create", {"key": key, **({"model": model} if model else {})})
        started = time.monotonic()
        sent = await client.call(
            "chat.send", {"sessionKey": key, "message": "hello there", "idempotencyKey": key}
        )
        assert sent["status"] == "started", sent
        outcome = await client.call("agent.wait", {"runId": key, "timeoutMs": 30_000}, timeout=40)
        elapsed = time.monotonic() - started
        assert outcome["status"] != "timeout", outcome
        again = await client.call("chat.send", {"sessionKey": key, "message": "x", "idempotencyKey": key})
        assert again["status"] == outcome["status"], (outcome, again)
        log = await event_log(setup.daemon, key)
        finished = [e for e in log if e["name"] == "agent.finished"]
        assert len(finished) == 1, finished
        assert finished[0]["terminationReason"] == outcome["terminationReason"], (finished, outcome)
        assert finished[0].get("errorMessage") == outcome.get("errorMessage"), (finished, outcome)
        assert log[-1]["name"] == "status.changed", log[-1]
        row = await client.call("sessions.describe", {"key": key})
        assert row["status"] == "idle" and not row["hasActiveRun"], row
        listing = await client.call("sessions.list", {"limit": 200})
        assert not [s["key"] for s in listing["sessions"] if s["status"] == "running"]
        hist = await history(client, key)
        assert "inFlightRun" not in hist
        outcome["_transcript"] = hist["messages"]
        return outcome, elapsed


async def test_connection_refused_by_the_provider_is_retried_then_recorded_as_error(setup: Setup) -> None:
    outcome, elapsed = await _run(setup, "agent:main:refused", model="deadend/some-model")
    assert outcome["status"] == "error" and outcome["terminationReason"] == "error", outcome
    assert "Connection error" in outcome["errorMessage"], outcome
    assert elapsed >= 1.0, "two retries with backoff were expected before giving up"
    last = outcome["_transcript"][-1]
    assert last["role"] == "assistant" and last["stopReason"] == "error", last


async def test_connection_reset_in_the_middle_of_a_stream_is_recorded_as_error(setup: Setup) -> None:
    seen = setup.llm.script(sse(chunk("Hel"), chunk("lo, "), chunk("wor"), delay=0.05, ending="reset"))
    outcome, _ = await _run(setup, "agent:main:reset")
    assert outcome["status"] == "error" and outcome["terminationReason"] == "error", outcome
    assert "Connection error" in outcome["errorMessage"], outcome
    assert setup.llm.requests_since(seen) == 1, "a stream that already delivered text must not be retried"
    last = outcome["_transcript"][-1]
    assert last["stopReason"] == "error" and text_of(last) == "Hello, wor", last


async def test_rate_limit_429_with_retry_after_is_waited_out_and_the_run_succeeds(setup: Setup) -> None:
    seen = setup.llm.script(
        status(429, {"error": {"message": "slow down"}}, headers={"retry-after": "1"}),
        sse(chunk("all "), chunk("good"), chunk(finish="stop"), DONE),
    )
    outcome, _ = await _run(setup, "agent:main:rate-limited")
    assert outcome["status"] == "ok" and outcome["terminationReason"] == "no_tool_calls", outcome
    assert outcome["text"] == "all good", outcome
    times = setup.llm.times_since(seen)
    assert len(times) == 2 and times[1] - times[0] >= 0.95, f"Retry-After: 1 was not honoured: {times}"


async def test_server_error_500_is_retried_then_recorded_as_error(setup: Setup) -> None:
    seen = setup.llm.script(*[status(500, {"error": {"message": "upstream exploded"}}) for _ in range(3)])
    outcome, _ = await _run(setup, "agent:main:server-error")
    assert outcome["status"] == "error" and outcome["terminationReason"] == "error", outcome
    assert "500" in outcome["errorMessage"] and "upstream exploded" in outcome["errorMessage"], outcome
    assert setup.llm.requests_since(seen) == 3, "a 500 is retried twice before the run fails"


async def test_stream_that_stalls_is_stopped_by_the_idle_timeout(setup: Setup) -> None:
    seen = setup.llm.script(sse(chunk("thinking about"), ending="stall"))
    outcome, elapsed = await _run(setup, "agent:main:stalled")
    assert outcome["status"] == "aborted" and outcome["terminationReason"] == "idle_timeout", outcome
    assert f"{IDLE_TIMEOUT_S:g} s" in outcome["errorMessage"], outcome
    assert IDLE_TIMEOUT_S <= elapsed < IDLE_TIMEOUT_S + 5, elapsed
    assert setup.llm.requests_since(seen) == 1
    last = outcome["_transcript"][-1]
    assert last["stopReason"] == "aborted" and text_of(last) == "thinking about", last
    # The daemon dropped the stalled HTTP request: the server saw its client go away.
    await asyncio.sleep(0.2)
    assert setup.llm.server.disconnects >= 1


async def test_stream_cut_before_its_last_chunk_is_recorded_as_error(setup: Setup) -> None:
    """The body ends without its terminating chunk (no finish_reason, no [DONE])."""
    setup.llm.script(sse(chunk("half a "), chunk("sentence"), ending="close"))
    outcome, _ = await _run(setup, "agent:main:cut-body")
    assert outcome["status"] == "error" and outcome["terminationReason"] == "error", outcome
    assert outcome["errorMessage"], outcome
    last = outcome["_transcript"][-1]
    assert last["stopReason"] == "error" and text_of(last) == "half a sentence", last


async def test_stream_that_ends_cleanly_without_finish_reason_or_done_is_kept_as_a_reply(
    setup: Setup,
) -> None:
    """pi-ai's rule (trace oa_09): a body that ends cleanly without finish_reason or [DONE] is a
    finished reply with stopReason "stop". The run is recorded as completed with the text it got;
    what is pinned here is that the outcome is recorded and nothing stays running."""
    setup.llm.script(sse(chunk("no "), chunk("terminator")))
    outcome, _ = await _run(setup, "agent:main:no-done")
    assert outcome["status"] == "ok" and outcome["terminationReason"] == "no_tool_calls", outcome
    assert outcome["stopReason"] == "stop" and outcome["text"] == "no terminator", outcome
