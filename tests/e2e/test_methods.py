"""Every method the daemon answers, called over a real connection, with its effects checked."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError, GatewayClient
from gateway.methods import HANDLERS
from tests.daemon import Daemon
from tests.e2e.helpers import MAIN, module_daemon, wait_for

TOKEN = "e2e-secret-token-0123456789"
API_KEY = "sk-e2e-provider-key-abcdef0123456789"
CONFIG = """
[compaction]
keep_recent_tokens = 1
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    env = {"GATEWAY_TOKEN": TOKEN, "OPENAI_API_KEY": API_KEY}
    with module_daemon(tmp_path_factory, "methods", config=CONFIG, env=env) as daemon:
        yield daemon


@pytest.fixture
async def client(gw: Daemon) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(gw.url, token=gw.token) as connected:
        yield connected


async def run(client: GatewayClient, key: str, message: str, idem: str, **extra: Any) -> dict[str, Any]:
    """chat.send and wait for the outcome."""
    params = {"sessionKey": key, "message": message, "idempotencyKey": idem, **extra}
    started = await client.call("chat.send", params)
    assert started["runId"] == idem
    outcome: dict[str, Any] = await client.call("agent.wait", {"runId": idem, "timeoutMs": 20_000})
    return outcome


async def history(client: GatewayClient, key: str, **extra: Any) -> dict[str, Any]:
    answer: dict[str, Any] = await client.call("chat.history", {"sessionKey": key, **extra})
    return answer


def texts(answer: dict[str, Any]) -> list[str]:
    out = []
    for message in answer["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out.append("".join(b.get("text", "") for b in content if b.get("type") == "text"))
    return out


def test_every_method_is_exercised_end_to_end() -> None:
    sources = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    missing = [name for name in HANDLERS if f'"{name}"' not in sources]
    assert not missing, f"methods without an end-to-end test: {missing}"


async def test_system_methods(client: GatewayClient, gw: Daemon) -> None:
    health = await client.call("health")
    assert health["ok"] is True and health["defaultAgentId"] == "main"
    assert health["agents"] == [{"agentId": "main", "isDefault": True, "model": "faux/echo"}]
    status = await client.call("status")
    assert status["connections"] >= 1 and status["model"] == "faux/echo"
    assert status["database"]["url"].endswith("gateway.db")
    assert await client.call("system-presence") == []
    agents = await client.call("agents.list")
    assert agents["defaultAgentId"] == "main" and agents["agents"][0]["id"] == "main"
    models = await client.call("models.list")
    assert "faux/echo" in {m["ref"] for m in models["models"]}
    commands = {c["name"]: c["source"] for c in (await client.call("commands.list"))["commands"]}
    assert {"status", "new", "stop"} <= {name for name, source in commands.items() if source == "native"}
    assert await client.call("channels.status") == {"channels": []}
    assert await client.call("pairing.list") == {"requests": []}
    with pytest.raises(CallError) as unknown:
        await client.call("pairing.approve", {"code": "NOPE1234"})
    assert unknown.value.code == "NOT_FOUND"
    assert await client.call("question.list") == {"questions": []}
    assert await client.call("plugin.approval.list") == {"approvals": []}


async def test_config_get_redacts_secrets_and_reload_applies_edits(client: GatewayClient, gw: Daemon) -> None:
    got = await client.call("config.get")
    text = json.dumps(got)
    assert TOKEN not in text and API_KEY not in text
    assert got["config"]["gateway"]["token"] == "***"
    assert got["config"]["providers"]["openai"]["api_key"] == "***"
    path = Path(got["path"])
    original = path.read_text()
    try:
        path.write_text(
            original + '\n[runs]\ncollect_window_ms = 250\n[agent_defaults]\nthinking_level = "low"\n'
        )
        reloaded = await client.call("config.reload")
        assert reloaded["changed"] == ["agent_defaults.thinking_level", "runs.collect_window_ms"]
        assert (await client.call("config.get"))["config"]["runs"]["collect_window_ms"] == 250
        assert (await client.call("agents.list"))["agents"][0]["thinkingLevel"] == "low"
        # The flags and environment the daemon started with still apply (port 0, the token).
        assert (await client.call("config.get"))["config"]["gateway"]["port"] == 0

        path.write_text(original + "\n[runs]\nmax_concurrent = -1\n")
        with pytest.raises(CallError) as bad:
            await client.call("config.reload")
        assert bad.value.code == "INVALID_REQUEST"
        assert "runs.max_concurrent" in str(bad.value) and str(path) in str(bad.value)
        assert (await client.call("config.get"))["config"]["runs"]["collect_window_ms"] == 250
    finally:
        path.write_text(original)
        await client.call("config.reload")


async def test_create_describe_patch_and_list_with_paging_and_filters(client: GatewayClient) -> None:
    created = []
    for name in ("alpha", "beta", "gamma"):
        answer = await client.call("sessions.create", {"key": f"agent:main:e2e-list:{name}", "label": name})
        assert answer["session"]["label"] == name and answer["key"] == f"agent:main:e2e-list:{name}"
        created.append(answer["sessionId"])
    with pytest.raises(CallError) as taken:
        await client.call("sessions.create", {"key": "agent:main:e2e-list:alpha"})
    assert taken.value.code == "INVALID_REQUEST"

    described = await client.call("sessions.describe", {"key": "agent:main:e2e-list:beta"})
    row = described["session"]
    for field in ("key", "sessionId", "kind", "parentId", "branchPoint", "label", "status"):
        assert field in row
    assert row["status"] == "idle" and row["hasActiveRun"] is False and row["activeRunIds"] == []
    assert row["model"] == "faux/echo" and row["lastSeq"] == 0

    patched = await client.call(
        "sessions.patch",
        {
            "key": "agent:main:e2e-list:beta",
            "label": "BETA",
            "thinkingLevel": "high",
            "queueMode": "followup",
        },
    )
    assert patched["session"]["label"] == "BETA"
    assert patched["session"]["thinkingLevel"] == "high"
    assert patched["session"]["effectiveQueueMode"] == "followup"
    with pytest.raises(CallError) as bad_model:
        await client.call("sessions.patch", {"key": "agent:main:e2e-list:beta", "model": "nope/nothing"})
    assert bad_model.value.code == "INVALID_REQUEST"

    found = await client.call("sessions.list", {"search": "e2e-list", "limit": 2})
    assert found["count"] == 2 and found["totalCount"] == 3 and found["hasMore"] is True
    rest = await client.call(
        "sessions.list", {"search": "e2e-list", "limit": 2, "offset": found["nextOffset"]}
    )
    assert rest["count"] == 1 and rest["hasMore"] is False and rest["nextOffset"] is None
    ids = {r["sessionId"] for r in found["sessions"] + rest["sessions"]}
    assert ids == set(created)
    assert (await client.call("sessions.list", {"search": "BETA"}))["sessions"][0]["sessionId"] == created[1]
    assert (await client.call("sessions.list", {"search": "e2e-list", "status": "running"}))["count"] == 0
    with pytest.raises(CallError) as unknown:
        await client.call("sessions.describe", {"key": "agent:main:no-such-session"})
    assert unknown.value.code == "NOT_FOUND"


async def test_branch_fork_tree_and_switch(client: GatewayClient) -> None:
    parent = "agent:main:e2e-tree"
    await run(client, parent, "one", "tree-1")
    await run(client, parent, "two", "tree-2")
    parent_history = await history(client, parent)
    assert texts(parent_history) == ["one", "echo: one", "two", "echo: two"]
    parent_id = parent_history["sessionId"]

    branched = (await client.call("sessions.branch", {"key": parent}))["session"]
    assert re.fullmatch(re.escape(parent) + r":branch:[0-9A-Za-z_-]+", branched["key"])
    assert branched["parentId"] == parent_id and branched["kind"] == "branch"
    assert branched["branchPoint"] == parent_history["messages"][-1]["__gateway"]["id"]
    # Nothing was copied: the branch shows the parent's entries as the parent's.
    inherited = await history(client, branched["key"])
    assert texts(inherited) == texts(parent_history)
    assert {m["__gateway"]["sessionId"] for m in inherited["messages"]} == {parent_id}

    await run(client, branched["key"], "three", "tree-3")
    assert texts(await history(client, branched["key"])) == [*texts(parent_history), "three", "echo: three"]
    assert texts(await history(client, parent)) == texts(parent_history)

    first_answer = parent_history["messages"][1]["__gateway"]["id"]
    early = (
        await client.call(
            "sessions.fork",
            {"sessionKey": parent, "newKey": "agent:main:e2e-tree:early", "entryId": first_answer},
        )
    )["session"]
    assert early["key"] == "agent:main:e2e-tree:early" and early["branchPoint"] == first_answer
    assert texts(await history(client, early["key"])) == ["one", "echo: one"]

    tree = (await client.call("sessions.tree", {"key": branched["key"]}))["root"]
    assert tree["sessionId"] == parent_id
    assert {c["sessionId"] for c in tree["children"]} == {branched["sessionId"], early["sessionId"]}

    switched = await client.call(
        "sessions.switch", {"key": "agent:main:e2e-tree:alias", "sessionId": branched["sessionId"]}
    )
    assert switched["session"]["sessionId"] == branched["sessionId"]
    alias = await client.call("sessions.describe", {"key": "agent:main:e2e-tree:alias"})
    assert alias["sessionId"] == branched["sessionId"]
    with pytest.raises(CallError) as unknown:
        await client.call("sessions.switch", {"key": "agent:main:x", "sessionId": "no-such-session"})
    assert unknown.value.code == "NOT_FOUND"


async def test_reset_archives_the_old_session_and_delete_removes(client: GatewayClient) -> None:
    key = "agent:main:e2e-reset"
    await run(client, key, "remember me", "reset-1")
    old = await history(client, key)
    reset = await client.call("sessions.reset", {"key": key})
    assert reset["previousSessionId"] == old["sessionId"] and reset["sessionId"] != old["sessionId"]
    assert (await history(client, key))["messages"] == []
    tree = (await client.call("sessions.tree", {"sessionId": old["sessionId"]}))["root"]
    assert tree["sessionId"] == old["sessionId"] and tree["status"] == "archived"
    listed = await client.call("sessions.list", {"archived": "all", "limit": 1000})
    assert {old["sessionId"], reset["sessionId"]} <= {r["sessionId"] for r in listed["sessions"]}
    archived = await client.call("sessions.list", {"archived": True, "limit": 1000})
    assert old["sessionId"] in {r["sessionId"] for r in archived["sessions"]}
    assert {r["status"] for r in archived["sessions"]} == {"archived"}
    unarchived = await client.call("sessions.list", {"limit": 1000})
    assert old["sessionId"] not in {r["sessionId"] for r in unarchived["sessions"]}
    assert texts(await history(client, key, sessionId=old["sessionId"])) == [
        "remember me",
        "echo: remember me",
    ]

    deleted = await client.call("sessions.delete", {"key": key})
    assert deleted["deleted"] is True and deleted["sessionId"] == reset["sessionId"]
    with pytest.raises(CallError) as gone:
        await client.call("sessions.describe", {"key": key})
    assert gone.value.code == "NOT_FOUND"


async def test_compact_summarises_older_history(client: GatewayClient) -> None:
    key = "agent:main:e2e-compact"
    for n in range(3):
        await run(client, key, f"message number {n}", f"compact-{n}")
    compacted = await client.call("sessions.compact", {"key": key})
    assert compacted["compacted"] is True and compacted["summary"]
    kept = compacted["firstKeptEntryId"]
    ids = [m["__gateway"]["id"] for m in (await history(client, key))["messages"]]
    assert kept in ids and ids.index(kept) > 0
    # The session still runs after compaction.
    assert (await run(client, key, "after", "compact-after"))["text"] == "echo: after"
    short = "agent:main:e2e-compact-empty"  # nothing to summarise
    await client.call("sessions.create", {"key": short})
    with pytest.raises(CallError) as too_short:
        await client.call("sessions.compact", {"key": short})
    assert too_short.value.code == "INVALID_REQUEST"


async def test_chat_send_is_idempotent(client: GatewayClient) -> None:
    params = {"sessionKey": "agent:main:e2e-idem", "message": "!long 60", "idempotencyKey": "idem-once"}
    assert await client.call("chat.send", params) == {"runId": "idem-once", "status": "started"}
    assert await client.call("chat.send", params) == {"runId": "idem-once", "status": "in_flight"}
    await client.call("agent.wait", {"runId": "idem-once", "timeoutMs": 20_000})
    stored = await client.call("chat.send", params)
    assert stored["runId"] == "idem-once" and stored["status"] == "ok"
    assert stored["text"] == " ".join(f"w{n}" for n in range(1, 61))
    assert len((await history(client, "agent:main:e2e-idem"))["messages"]) == 2


async def test_history_shows_the_run_in_flight_and_pages(client: GatewayClient, gw: Daemon) -> None:
    key = "agent:main:e2e-inflight"
    await client.call("sessions.create", {"key": key})
    await client.call("sessions.messages.subscribe", {"key": key})
    await client.call(
        "chat.send", {"sessionKey": key, "message": "!long 200", "idempotencyKey": "inflight-1"}
    )
    # Past its first 20 words (OpenClaw deltas are paced: each carries all the text so far).
    await wait_for(
        client,
        lambda e: (
            e["event"] == "chat"
            and e["payload"]["state"] == "delta"
            and len(e["payload"]["message"]["content"][0]["text"].split()) > 20
        ),
    )
    during = await history(client, key)
    assert during["inFlightRun"]["runId"] == "inflight-1"
    partial = during["inFlightRun"]["text"]
    assert partial.startswith("w1 w2 w3") and len(partial.split()) < 200
    assert during["sessionInfo"]["hasActiveRun"] is True
    assert during["sessionInfo"]["activeRunIds"] == ["inflight-1"]
    assert during["sessionInfo"]["status"] == "running"
    final = await client.call("agent.wait", {"runId": "inflight-1", "timeoutMs": 20_000})
    assert final["text"].startswith(partial)
    after = await history(client, key)
    assert "inFlightRun" not in after and after["sessionInfo"]["status"] == "idle"

    for n in range(2):
        await run(client, key, f"page {n}", f"inflight-page-{n}")
    page = await history(client, key, limit=2)
    assert texts(page) == ["page 1", "echo: page 1"] and page["hasMore"] is True
    older = await history(client, key, limit=2, cursor=page["cursor"])
    assert texts(older) == ["page 0", "echo: page 0"]


async def test_abort_a_running_reply(client: GatewayClient) -> None:
    key = "agent:main:e2e-abort"
    for idem, method in (("abort-1", "chat.abort"), ("abort-2", "sessions.abort")):
        await client.call("chat.send", {"sessionKey": key, "message": "!long 2000", "idempotencyKey": idem})
        await asyncio.sleep(0.3)
        answer = await client.call(method, {"sessionKey": key, "key": key})
        assert answer == {"ok": True, "aborted": True, "runIds": [idem]}
        outcome = await client.call("agent.wait", {"runId": idem, "timeoutMs": 10_000})
        assert outcome["status"] == "aborted" and outcome["terminationReason"] == "aborted"
    nothing = await client.call("chat.abort", {"sessionKey": key})
    assert nothing == {"ok": True, "aborted": False, "runIds": []}
    last = (await history(client, key))["messages"][-1]
    assert last["role"] == "assistant" and last["stopReason"] == "aborted"


async def test_inject_appends_without_running(client: GatewayClient) -> None:
    key = "agent:main:e2e-inject"
    await client.call("sessions.create", {"key": key})
    await client.call("sessions.messages.subscribe", {"key": key})
    injected = await client.call("chat.inject", {"sessionKey": key, "message": "noted by an operator"})
    event = await wait_for(client, lambda e: e["event"] == "session.message")
    assert event["payload"]["messageId"] == injected["messageId"]
    answer = await history(client, key)
    assert texts(answer) == ["noted by an operator"] and answer["messages"][0]["role"] == "assistant"
    assert "inFlightRun" not in answer


async def test_agent_answers_twice_on_one_request(client: GatewayClient) -> None:
    response = await client.request(
        "agent",
        {"message": "twice please", "idempotencyKey": "agent-1", "sessionKey": "agent:main:e2e-agent"},
    )
    accepted = response["payload"]
    assert response["ok"] and accepted["status"] == "accepted" and accepted["runId"] == "agent-1"
    assert accepted["sessionKey"] == "agent:main:e2e-agent" and accepted["agentId"] == "main"
    final = await asyncio.wait_for(response["_final"], 20)
    assert final["id"] == response["id"] and final["ok"] is True
    assert final["payload"]["status"] == "ok" and final["payload"]["runId"] == "agent-1"
    assert final["payload"]["result"]["text"] == "echo: twice please"

    failed = await client.request("agent", {"message": "!error boom", "idempotencyKey": "agent-2"})
    assert failed["payload"]["status"] == "accepted" and failed["payload"]["sessionKey"] == MAIN
    final = await asyncio.wait_for(failed["_final"], 20)
    assert final["ok"] is False and final["payload"]["status"] == "error"
    assert final["error"]["message"] == "boom" and final["payload"]["error"] == "boom"


async def test_agent_wait_times_out_and_knows_unknown_runs(client: GatewayClient) -> None:
    key = "agent:main:e2e-wait"
    await client.call(
        "chat.send", {"sessionKey": key, "message": "!sleep 5000 late", "idempotencyKey": "wait-1"}
    )
    assert await client.call("agent.wait", {"runId": "wait-1", "timeoutMs": 100}) == {
        "runId": "wait-1",
        "status": "timeout",
    }
    await client.call("chat.abort", {"sessionKey": key})
    assert (await client.call("agent.wait", {"runId": "wait-1"}))["status"] == "aborted"
    with pytest.raises(CallError) as unknown:
        await client.call("agent.wait", {"runId": "never-sent", "timeoutMs": 100})
    assert unknown.value.code == "NOT_FOUND"


async def test_sessions_send_into_an_existing_session(client: GatewayClient) -> None:
    key = "agent:main:e2e-send"
    await client.call("sessions.create", {"key": key})
    answer = await client.call("sessions.send", {"key": key, "message": "via sessions.send"})
    assert answer["status"] == "started"
    outcome = await client.call("agent.wait", {"runId": answer["runId"], "timeoutMs": 20_000})
    assert outcome["text"] == "echo: via sessions.send"


async def test_list_and_message_subscriptions(client: GatewayClient, gw: Daemon) -> None:
    listing = await client.call("sessions.subscribe", {})
    assert listing["subscribed"] is True
    await client.call("sessions.create", {"key": "agent:main:e2e-sub", "label": "watched"})
    changed = await wait_for(
        client,
        lambda e: e["event"] == "sessions.changed" and e["payload"]["sessionKey"] == "agent:main:e2e-sub",
    )
    assert changed["payload"]["reason"] == "create" and changed["payload"]["session"]["label"] == "watched"

    subscribed = await client.call("sessions.messages.subscribe", {"key": "agent:main:e2e-sub"})
    assert subscribed["subscribed"] is True and subscribed["key"] == "agent:main:e2e-sub"
    await run(client, "agent:main:e2e-sub", "watch this", "sub-1")
    seen: list[dict[str, Any]] = []
    await wait_for(
        client,
        lambda e: e["event"] == "session.message" and e["payload"]["message"]["role"] == "assistant",
        into=seen,
    )
    messages = [e["payload"]["message"] for e in seen if e["event"] == "session.message"]
    assert [m["role"] for m in messages] == ["user", "assistant"]

    await client.call("sessions.messages.unsubscribe", {"key": "agent:main:e2e-sub"})
    assert await client.call("sessions.unsubscribe", {}) == {"subscribed": False}
    client.drain_events()
    await run(client, "agent:main:e2e-sub", "unwatched", "sub-2")
    await client.call("sessions.patch", {"key": "agent:main:e2e-sub", "label": "again"})
    await asyncio.sleep(0.3)
    late = [e["event"] for e in client.drain_events()]
    assert "session.message" not in late and "sessions.changed" not in late


async def test_native_event_subscription_can_be_cancelled(client: GatewayClient) -> None:
    key = "agent:main:e2e-native"
    await client.call("sessions.create", {"key": key})
    answer = await client.call("sessions.events.subscribe", {"key": key})
    assert answer["replay"] == "none" and answer["lastSeq"] == 0
    await run(client, key, "hello", "native-1")
    end = await wait_for(client, lambda e: e["event"] == "session.agent.finished")
    assert end["payload"]["terminationReason"] == "no_tool_calls"
    await client.call("sessions.events.unsubscribe", {"key": key})
    client.drain_events()
    await run(client, key, "again", "native-2")
    await asyncio.sleep(0.2)
    assert not [e for e in client.drain_events() if e["event"].startswith("session.")]


# --- keys no session has used yet (OpenClaw's Control UI and TUI open on `agent:main:main`) ----


async def test_message_subscription_to_an_unused_key_receives_the_session_once_used(
    client: GatewayClient, gw: Daemon
) -> None:
    key = "agent:main:e2e-fresh-messages"
    subscribed = await client.call("sessions.messages.subscribe", {"key": key})
    assert subscribed == {"subscribed": True, "key": key, "sessionId": None}
    async with GatewayClient(gw.url, token=gw.token) as sender:
        await run(sender, key, "first words", "fresh-messages-1")
    seen: list[dict[str, Any]] = []
    await wait_for(
        client,
        lambda e: e["event"] == "session.message" and e["payload"]["message"]["role"] == "assistant",
        into=seen,
    )
    messages = [e["payload"] for e in seen if e["event"] == "session.message"]
    assert [m["message"]["role"] for m in messages] == ["user", "assistant"]
    assert {m["sessionKey"] for m in messages} == {key}
    # Session-scoped clients get the OpenClaw stream of a session they subscribed to as well.
    assert any(e["event"] == "chat" and e["payload"]["sessionKey"] == key for e in seen)


async def test_native_subscription_from_the_start_of_an_unused_key_gets_every_event(
    client: GatewayClient, gw: Daemon
) -> None:
    key = "agent:main:e2e-fresh-native"
    answer = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
    assert answer == {"subscribed": True, "sessionId": None, "key": key, "lastSeq": 0, "replay": "exact"}
    async with GatewayClient(gw.url, token=gw.token) as sender:
        await sender.call(
            "chat.send", {"sessionKey": key, "message": "!long 30", "idempotencyKey": "fresh-n"}
        )
    events: list[dict[str, Any]] = []
    await wait_for(client, lambda e: e["event"] == "session.agent.finished", into=events)
    native = [e for e in events if e["event"].startswith("session.") and e["event"] != "session.message"]
    assert [e["payload"]["sessionSeq"] for e in native] == list(range(1, len(native) + 1))
    text = "".join(e["payload"]["delta"] for e in native if e["event"] == "session.message.delta")
    assert text == " ".join(f"w{n}" for n in range(1, 31))
    # Later afterSeq values of a key without a session are still unknown.
    with pytest.raises(CallError) as unknown:
        await client.call("sessions.events.subscribe", {"key": "agent:main:e2e-never", "afterSeq": 5})
    assert unknown.value.code == "NOT_FOUND"


async def test_history_of_an_unused_key_is_empty_and_the_session_appears_when_used(
    client: GatewayClient,
) -> None:
    key = "agent:main:e2e-fresh-history"
    empty = await history(client, key)
    assert empty["messages"] == [] and empty["sessionKey"] == key and empty["sessionId"] is None
    assert empty["hasMore"] is False and empty["totalMessages"] == 0
    with pytest.raises(CallError) as not_yet:
        await client.call("sessions.describe", {"key": key})
    assert not_yet.value.code == "NOT_FOUND"
    await run(client, key, "now it exists", "fresh-history-1")
    assert texts(await history(client, key)) == ["now it exists", "echo: now it exists"]


async def test_keys_of_an_agent_that_is_not_configured_are_not_found(client: GatewayClient) -> None:
    for method, params in (
        ("sessions.messages.subscribe", {"key": "agent:nobody:main"}),
        ("sessions.events.subscribe", {"key": "agent:nobody:main", "afterSeq": 0}),
        ("chat.history", {"sessionKey": "agent:nobody:main"}),
    ):
        with pytest.raises(CallError) as unknown:
            await client.call(method, params)
        assert unknown.value.code == "NOT_FOUND" and "nobody" in str(unknown.value), method


async def test_an_unexpected_failure_is_an_internal_error_not_worth_retrying(
    client: GatewayClient, gw: Daemon
) -> None:
    """A transcript entry damaged in the database (a message that is not an object) makes the
    handler fail in a way it does not expect: the client is told, once, not to retry."""
    key = "agent:main:e2e-damaged"
    await run(client, key, "soon damaged", "damaged-1")
    first = (await history(client, key))["messages"][0]["__gateway"]["id"]
    with sqlite3.connect(gw.home / "gateway.db", timeout=10) as db:
        db.execute("UPDATE entries SET payload = '5' WHERE id = ?", (first,))
    response = await client.request("chat.history", {"sessionKey": key})
    assert response["ok"] is False
    error = response["error"]
    assert error["code"] == "INTERNAL" and error["retryable"] is False and "retryAfterMs" not in error
    assert "chat.history" in error["message"] and "Traceback" not in error["message"]
    # The connection and the gateway carry on.
    assert (await client.call("health"))["ok"] is True
