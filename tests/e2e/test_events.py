"""Events as clients receive them: per-connection `seq`, `tick`, OpenClaw-shaped `agent`/`chat`
streams, tool events by capability, session-scoped delivery."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.client import GatewayClient
from tests.daemon import Daemon
from tests.e2e.helpers import Raw, connect_params, load_json, module_daemon, shape_problems, wait_for

CONFIG = """
[gateway]
tick_interval_ms = 300
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_daemon(tmp_path_factory, "events", config=CONFIG) as daemon:
        yield daemon


def openclaw_client(gw: Daemon, caps: tuple[str, ...] = ()) -> GatewayClient:
    """A client like the OpenClaw CLI: no session-scoped-events cap, so it gets every stream."""
    return GatewayClient(gw.url, token=gw.token, caps=caps, client_id="cli")


def run_end(run_id: str) -> Any:
    return lambda e: (
        e["event"] == "chat" and e["payload"]["runId"] == run_id and e["payload"]["state"] != "delta"
    )


async def test_seq_counts_every_event_of_a_connection_from_1(gw: Daemon) -> None:
    async with openclaw_client(gw) as client:
        await client.call(
            "chat.send", {"sessionKey": "agent:main:ev-seq", "message": "!long 30", "idempotencyKey": "s1"}
        )
        seen: list[dict[str, Any]] = []
        await wait_for(client, run_end("s1"), into=seen)
        await wait_for(client, lambda e: e["event"] == "tick", into=seen)
        assert {"agent", "chat", "tick"} <= {e["event"] for e in seen}
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
        assert client.gaps == 0


async def test_ticks_arrive_at_the_configured_interval(gw: Daemon) -> None:
    async with openclaw_client(gw) as client:
        assert client.hello["policy"]["tickIntervalMs"] == 300
        stamps = []
        for _ in range(4):
            tick = await wait_for(client, lambda e: e["event"] == "tick", timeout=5)
            stamps.append(tick["payload"]["ts"])
            assert abs(tick["payload"]["ts"] - time.time() * 1000) < 5000
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert all(250 <= gap < 1500 for gap in gaps), gaps


def _common_keys(frames: list[dict[str, Any]]) -> list[str]:
    keys = set(frames[0]["payload"])
    for frame in frames[1:]:
        keys &= set(frame["payload"])
    return sorted(keys)


async def test_agent_and_chat_streams_are_shaped_like_openclaw(gw: Daemon) -> None:
    captured_agent = load_json("agent_events.json")
    captured_chat = load_json("chat_events.json")
    async with openclaw_client(gw) as client:
        await client.call(
            "chat.send",
            {"sessionKey": "agent:main:ev-shape", "message": "one two three", "idempotencyKey": "shape-1"},
        )
        seen: list[dict[str, Any]] = []
        await wait_for(client, run_end("shape-1"), into=seen)
    agent = [e for e in seen if e["event"] == "agent"]
    chat = [e for e in seen if e["event"] == "chat"]
    problems: list[str] = []
    for ours in agent:
        problems += shape_problems(
            ours["payload"], captured_agent[0]["payload"], _common_keys(captured_agent), "agent"
        )
        problems += shape_problems(
            ours, captured_agent[0], ["type", "event", "payload", "seq"], "agent frame"
        )
    for ours in chat:
        problems += shape_problems(
            ours["payload"], captured_chat[0]["payload"], _common_keys(captured_chat), "chat"
        )
    assert not problems, "\n".join(problems)

    # lifecycle start, assistant deltas with cumulative text, lifecycle end; run seq 1, 2, 3, ...
    assert [e["payload"]["seq"] for e in agent] == list(range(1, len(agent) + 1))
    assert agent[0]["payload"]["stream"] == "lifecycle" and agent[0]["payload"]["data"]["phase"] == "start"
    assert agent[-1]["payload"]["stream"] == "lifecycle" and agent[-1]["payload"]["data"]["phase"] == "end"
    assistant = [e["payload"]["data"] for e in agent if e["payload"]["stream"] == "assistant"]
    assert assistant[-1]["text"] == "echo: one two three"
    assert "".join(d["delta"] for d in assistant) == "echo: one two three"
    for before, after in itertools.pairwise(assistant):
        assert after["text"] == before["text"] + after["delta"]
    assert {e["payload"]["runId"] for e in agent + chat} == {"shape-1"}
    assert {e["payload"]["sessionKey"] for e in agent + chat} == {"agent:main:ev-shape"}
    assert {e["payload"]["agentId"] for e in agent + chat} == {"main"}

    deltas = [e["payload"] for e in chat if e["payload"]["state"] == "delta"]
    final = chat[-1]["payload"]
    assert "".join(d["deltaText"] for d in deltas) == "echo: one two three"
    assert deltas[-1]["message"]["content"] == [{"type": "text", "text": "echo: one two three"}]
    assert final["state"] == "final" and final["stopReason"] == "stop"
    assert final["message"]["content"][0]["text"] == "echo: one two three"
    assert set(final["usage"]) >= {"input", "output", "totalTokens"}
    # A chat event carries the run seq of the agent event it accompanies.
    agent_seqs = {e["payload"]["seq"] for e in agent}
    assert all(d["seq"] in agent_seqs for d in deltas) and final["seq"] == agent[-1]["payload"]["seq"]


async def test_errors_and_aborts_end_the_chat_stream(gw: Daemon) -> None:
    async with openclaw_client(gw) as client:
        await client.call(
            "chat.send",
            {"sessionKey": "agent:main:ev-err", "message": "!error kaput", "idempotencyKey": "err-1"},
        )
        failed = await wait_for(client, run_end("err-1"))
        assert failed["payload"]["state"] == "error" and failed["payload"]["errorMessage"] == "kaput"
        await client.call(
            "chat.send",
            {"sessionKey": "agent:main:ev-err", "message": "!long 3000", "idempotencyKey": "err-2"},
        )

        def streamed_two_words(e: Any) -> bool:
            if e["event"] != "chat" or e["payload"]["runId"] != "err-2":
                return False
            content = e["payload"].get("message", {}).get("content") or [{}]
            return "w2" in str(content[0].get("text", ""))

        # Abort once the stream shows two words, so the partial reply has them (the first delta
        # may carry only the first word).
        await wait_for(client, streamed_two_words)
        await client.call("chat.abort", {"sessionKey": "agent:main:ev-err"})
        aborted = await wait_for(client, run_end("err-2"))
        assert aborted["payload"]["state"] == "aborted"
        assert aborted["payload"]["message"]["content"][0]["text"].startswith("w1 w2")


async def test_tool_events_only_with_the_tool_events_cap(gw: Daemon) -> None:
    async with openclaw_client(gw, caps=("tool-events",)) as tools, openclaw_client(gw) as plain:
        await tools.call(
            "chat.send",
            {"sessionKey": "agent:main:ev-tool", "message": '!tool ls {"path": "."}', "idempotencyKey": "t1"},
        )
        with_cap: list[dict[str, Any]] = []
        without: list[dict[str, Any]] = []
        await wait_for(tools, run_end("t1"), into=with_cap)
        await wait_for(plain, run_end("t1"), into=without)
    tool_events = [
        e["payload"] for e in with_cap if e["event"] == "agent" and e["payload"]["stream"] == "tool"
    ]
    assert [t["data"]["phase"] for t in tool_events] == ["start", "result"]
    assert tool_events[0]["data"]["name"] == "ls" and tool_events[0]["data"]["args"] == {"path": "."}
    assert tool_events[0]["data"]["toolCallId"] == tool_events[1]["data"]["toolCallId"]
    assert not [e for e in without if e["event"] == "agent" and e["payload"]["stream"] == "tool"]
    # Both saw the rest of the run.
    assert [e["event"] for e in with_cap if e["event"] == "chat"] == [
        e["event"] for e in without if e["event"] == "chat"
    ]


async def test_session_scoped_clients_get_streams_only_for_their_sessions(gw: Daemon) -> None:
    caps = ("session-scoped-events",)
    async with openclaw_client(gw, caps) as scoped, openclaw_client(gw) as everything:
        await scoped.call("sessions.create", {"key": "agent:main:ev-mine"})
        await scoped.call("sessions.messages.subscribe", {"key": "agent:main:ev-mine"})
        for key, idem in (("agent:main:ev-other", "o1"), ("agent:main:ev-mine", "m1")):
            await everything.call("chat.send", {"sessionKey": key, "message": "hi", "idempotencyKey": idem})
            await everything.call("agent.wait", {"runId": idem, "timeoutMs": 10_000})
        got: list[dict[str, Any]] = []
        await wait_for(scoped, run_end("m1"), into=got)
        all_seen: list[dict[str, Any]] = []
        await wait_for(everything, run_end("m1"), into=all_seen)
        await asyncio.sleep(0.1)
        got += scoped.drain_events()
    runs = {e["payload"]["runId"] for e in got if e["event"] in ("agent", "chat")}
    assert runs == {"m1"}
    assert {"o1", "m1"} <= {e["payload"]["runId"] for e in all_seen if e["event"] in ("agent", "chat")}


async def test_openclaw_deltas_are_paced_in_order_and_the_final_carries_the_whole_text(gw: Daemon) -> None:
    """`!long 80` streams a word every 10 ms: an OpenClaw client gets at most one delta every
    75 ms, each carrying the text so far, and a final with all of it; a native client gets every
    word."""
    caps = ("session-scoped-events", "native-events-only")
    async with openclaw_client(gw) as client, GatewayClient(gw.url, token=gw.token, caps=caps) as native:
        await native.call("sessions.events.subscribe", {"key": "agent:main:ev-paced"})
        started = time.monotonic()
        await client.call(
            "chat.send",
            {"sessionKey": "agent:main:ev-paced", "message": "!long 80", "idempotencyKey": "pace"},
        )
        seen: list[dict[str, Any]] = []
        await wait_for(client, run_end("pace"), into=seen)
        elapsed = time.monotonic() - started
        natively: list[dict[str, Any]] = []
        await wait_for(native, lambda e: e["event"] == "session.agent.finished", into=natively)
    text = " ".join(f"w{n}" for n in range(1, 81))
    run = [e["payload"] for e in seen if e["event"] in ("agent", "chat") and e["payload"]["runId"] == "pace"]
    assistant = [p["data"] for p in run if p.get("stream") == "assistant"]
    chat_deltas = [p for p in run if p.get("state") == "delta"]
    # Spaced: no more deltas than 75 ms intervals in the whole exchange (the machine's load only
    # lengthens it), far fewer than the words.
    assert len(chat_deltas) == len(assistant) <= elapsed / 0.075 + 2
    assert len(assistant) < 80
    # In order, each carrying the text so far; together, all of it.
    assert "".join(d["delta"] for d in assistant) == text
    assert all(
        after["text"] == before["text"] + after["delta"] for before, after in itertools.pairwise(assistant)
    )
    assert "".join(d["deltaText"] for d in chat_deltas) == text
    agent_seqs = [p["seq"] for p in run if "stream" in p]
    assert agent_seqs == list(range(1, len(agent_seqs) + 1))
    final = run[-1]
    assert final["state"] == "final" and final["message"]["content"] == [{"type": "text", "text": text}]
    words = [e["payload"]["delta"] for e in natively if e["event"] == "session.message.delta"]
    assert "".join(words) == text and len(words) == 80


async def test_presence_is_the_whole_list_in_hello_ok_then_changes(gw: Daemon) -> None:
    def ui(instance: str) -> dict[str, Any]:
        params = connect_params(gw.token, mode="ui", client_id="openclaw-control-ui")
        params["client"]["instanceId"] = instance
        return params

    first = await Raw.open(gw.url)
    hello = await first.handshake(ui("ui-first"))
    assert hello["ok"]
    before = hello["payload"]["snapshot"]
    assert "ui-first" not in [e["instanceId"] for e in before["presence"]]
    joined = await _presence_event(first)
    assert [e["instanceId"] for e in joined["payload"]["upserted"]] == ["ui-first"]
    assert joined["payload"]["removed"] == []
    assert joined["stateVersion"]["presence"] > before["stateVersion"]["presence"]

    second = await Raw.open(gw.url)
    hello = await second.handshake(ui("ui-second"))
    snapshot = hello["payload"]["snapshot"]
    assert "ui-first" in [e["instanceId"] for e in snapshot["presence"]]
    assert snapshot["stateVersion"]["presence"] >= joined["stateVersion"]["presence"]
    change = await _presence_event(first)
    assert [e["instanceId"] for e in change["payload"]["upserted"]] == ["ui-second"]
    entry = change["payload"]["upserted"][0]
    assert entry["mode"] == "ui" and entry["platform"] == "linux" and isinstance(entry["ts"], int)
    listed = (await first.request("system-presence"))["payload"]
    assert {"ui-first", "ui-second"} <= {e["instanceId"] for e in listed}

    await second.ws.close()
    left = await _presence_event(first)
    assert left["payload"] == {"upserted": [], "removed": ["ui-second"]}
    # A command-line client gets no entry, and its coming and going changes nothing.
    async with openclaw_client(gw) as cli:
        assert "cli" not in {e.get("mode") for e in await cli.call("system-presence")}
    await first.ws.close()


async def _presence_event(raw: Raw) -> dict[str, Any]:
    while True:
        frame = await raw.recv()
        if frame.get("event") == "presence":
            return frame
