"""Stopping the daemon: SIGTERM drains gracefully; after SIGKILL a restart closes what was cut off.
Idempotency keys keep their outcomes across restarts."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

from gateway.client import GatewayClient
from tests.daemon import start_daemon
from tests.e2e.helpers import Raw, connect_params, wait_for

WORDS_3000 = "!long 3000"


def text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")


async def test_sigterm_drains_and_restart_keeps_outcomes(gateway_home: Path) -> None:
    key = "agent:main:drain"
    daemon = start_daemon(gateway_home, config="[gateway]\nshutdown_grace_s = 2.5\n")
    async with GatewayClient(daemon.url, token=daemon.token, caps=(), client_id="cli") as watcher:
        done = await watcher.call(
            "chat.send", {"sessionKey": key, "message": "finished", "idempotencyKey": "d-1"}
        )
        assert done["status"] == "started"
        assert (await watcher.call("agent.wait", {"runId": "d-1"}))["status"] == "ok"
        await watcher.call("chat.send", {"sessionKey": key, "message": WORDS_3000, "idempotencyKey": "d-2"})
        await wait_for(watcher, lambda e: e["event"] == "chat" and e["payload"]["seq"] > 10)

        daemon.proc.send_signal(signal.SIGTERM)
        seen: list[dict[str, Any]] = []
        shutdown = await wait_for(watcher, lambda e: e["event"] == "shutdown", into=seen)
        assert shutdown["payload"]["reason"] == "gateway stopping"

        # While draining: new connections are refused as retryable, new messages too.
        raw = await Raw.open(daemon.url)
        refused = await raw.handshake(connect_params(daemon.token))
        assert refused["error"]["code"] == "UNAVAILABLE" and refused["error"]["retryable"] is True
        assert (await raw.closed())[0] == 1013
        busy = await watcher.request(
            "chat.send", {"sessionKey": key, "message": "late", "idempotencyKey": "d-3"}
        )
        assert busy["ok"] is False and busy["error"]["code"] == "UNAVAILABLE" and busy["error"]["retryable"]

        # The run outlives the grace period and is aborted; then the connection closes 1012.
        aborted = await wait_for(
            watcher, lambda e: e["event"] == "chat" and e["payload"]["state"] == "aborted", into=seen
        )
        assert aborted["seq"] > shutdown["seq"]
        await asyncio.wait_for(watcher.closed.wait(), 10)
        assert (watcher.close_code, watcher.close_reason) == (1012, "service restart")
    assert await asyncio.to_thread(daemon.proc.wait, 30) == 0, daemon.logs()
    assert "Traceback" not in daemon.logs()

    daemon = start_daemon(gateway_home, tag="again")
    try:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            outcome = await client.call("agent.wait", {"runId": "d-2", "timeoutMs": 1000})
            assert outcome["status"] == "aborted" and outcome["terminationReason"] == "gateway_shutdown"
            # Repeating a key answers its stored outcome and never runs it again.
            again = await client.call(
                "chat.send", {"sessionKey": key, "message": WORDS_3000, "idempotencyKey": "d-2"}
            )
            assert again["status"] == "aborted" and again["terminationReason"] == "gateway_shutdown"
            first = await client.call(
                "chat.send", {"sessionKey": key, "message": "finished", "idempotencyKey": "d-1"}
            )
            assert first["status"] == "ok" and first["text"] == "echo: finished"
            never = await client.call(
                "chat.send", {"sessionKey": key, "message": "late", "idempotencyKey": "d-3"}
            )
            assert never["status"] == "started"
            await client.call("agent.wait", {"runId": "d-3"})

            history = await client.call("chat.history", {"sessionKey": key})
            assert "inFlightRun" not in history and history["sessionInfo"]["status"] == "idle"
            roles = [(m["role"], m.get("stopReason")) for m in history["messages"]]
            assert roles == [
                ("user", None),
                ("assistant", "stop"),
                ("user", None),
                ("assistant", "aborted"),
                ("user", None),
                ("assistant", "stop"),
            ]
            assert text_of(history["messages"][3]).startswith("w1 w2 w3")
            # The event log was flushed: the abort is in it.
            await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
            ends: list[dict[str, Any]] = []
            while len(ends) < 3:
                event = await wait_for(client, lambda e: e["event"] == "session.agent.finished")
                ends.append(event["payload"])
            assert [(e["runId"], e["terminationReason"]) for e in ends] == [
                ("d-1", "no_tool_calls"),
                ("d-2", "gateway_shutdown"),
                ("d-3", "no_tool_calls"),
            ]
    finally:
        assert daemon.stop() == 0, daemon.logs()


async def test_restart_after_sigkill_closes_the_interrupted_run(gateway_home: Path) -> None:
    cut, queued = "agent:main:cut", "agent:main:queued"
    daemon = start_daemon(gateway_home)
    async with GatewayClient(daemon.url, token=daemon.token) as client:
        for key in (cut, queued):
            await client.call("sessions.create", {"key": key})
            await client.call("sessions.events.subscribe", {"key": key})
        await client.call("chat.send", {"sessionKey": cut, "message": WORDS_3000, "idempotencyKey": "k-1"})
        await client.call("chat.send", {"sessionKey": queued, "message": WORDS_3000, "idempotencyKey": "k-2"})
        follow = {
            "sessionKey": queued,
            "message": "after the crash",
            "idempotencyKey": "k-3",
            "queueMode": "followup",
        }
        assert (await client.call("chat.send", follow))["status"] == "started"
        seen: list[dict[str, Any]] = []
        await wait_for(
            client,
            lambda e: e["event"] == "session.message.delta" and e["payload"]["delta"].strip() == "w40",
            into=seen,
        )
        daemon.kill()
    streamed = "".join(
        e["payload"]["delta"]
        for e in seen
        if e["event"] == "session.message.delta" and e["payload"]["sessionKey"] == cut
    )
    assert streamed.startswith("w1 w2")

    daemon = start_daemon(gateway_home, tag="again")
    try:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            history = await client.call("chat.history", {"sessionKey": cut})
            assert "inFlightRun" not in history
            assert history["sessionInfo"]["status"] == "interrupted"
            assert history["sessionInfo"]["hasActiveRun"] is False
            last = history["messages"][-1]
            assert last["role"] == "assistant" and last["stopReason"] == "aborted"
            assert "gateway stopped" in last["errorMessage"]
            recovered = text_of(last)
            assert recovered.startswith(streamed) and "w3000" not in recovered
            outcome = await client.call("agent.wait", {"runId": "k-1", "timeoutMs": 1000})
            assert outcome["status"] == "aborted"
            # Not repeated automatically, nor when the key is sent again.
            repeated = await client.call(
                "chat.send", {"sessionKey": cut, "message": WORDS_3000, "idempotencyKey": "k-1"}
            )
            assert repeated["status"] == "aborted"
            assert len((await client.call("chat.history", {"sessionKey": cut}))["messages"]) == 2

            # The input that was accepted but had not started runs after the restart.
            resumed = await client.call("agent.wait", {"runId": "k-3", "timeoutMs": 20_000})
            assert resumed["status"] == "ok", resumed
            texts = [
                text_of(m) for m in (await client.call("chat.history", {"sessionKey": queued}))["messages"]
            ]
            assert texts[-2:] == ["after the crash", "echo: after the crash"]
    finally:
        assert daemon.stop() == 0, daemon.logs()
