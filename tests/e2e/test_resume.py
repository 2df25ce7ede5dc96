"""Resuming a session's event stream after a dropped connection: exact replay, the snapshot after
old deltas were pruned, unknown sessions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import CallError, GatewayClient
from sessions.store import Store
from tests.daemon import Daemon, start_daemon
from tests.e2e.helpers import is_run_end, module_daemon, wait_for


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with module_daemon(tmp_path_factory, "resume") as daemon:
        yield daemon


def native(events: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
    """The session events in a list of frames: (name, sessionSeq, delta)."""
    return [
        (e["event"], e["payload"]["sessionSeq"], e["payload"].get("delta"))
        for e in events
        if e["event"].startswith("session.") and e["event"] not in ("session.message", "session.snapshot")
    ]


def deltas_of(events: list[dict[str, Any]]) -> str:
    return "".join(
        e["payload"]["delta"]
        for e in events
        if e["event"] == "session.message.delta" and e["payload"]["kind"] == "text"
    )


async def test_a_dropped_client_resumes_exactly(gw: Daemon) -> None:
    key = "agent:main:resume"
    async with (
        GatewayClient(gw.url, token=gw.token) as steady,
        GatewayClient(gw.url, token=gw.token) as writer,
    ):
        await writer.call("sessions.create", {"key": key})
        await steady.call("sessions.events.subscribe", {"key": key})
        flaky = GatewayClient(gw.url, token=gw.token)
        await flaky.connect()
        await flaky.call("sessions.events.subscribe", {"key": key})
        await writer.call(
            "chat.send", {"sessionKey": key, "message": "!long 300", "idempotencyKey": "resume-1"}
        )

        before: list[dict[str, Any]] = []
        await wait_for(
            flaky,
            lambda e: len([x for x in before if x["event"] == "session.message.delta"]) >= 50,
            into=before,
        )
        flaky.abort()
        await flaky.aclose()
        before += flaky.drain_events()
        last = max(seq for _, seq, _ in native(before))
        await asyncio.sleep(0.3)  # the run goes on while the client is away

        async with GatewayClient(gw.url, token=gw.token) as again:
            answer = await again.call("sessions.events.subscribe", {"key": key, "afterSeq": last})
            assert answer["replay"] == "exact" and answer["lastSeq"] > last
            after: list[dict[str, Any]] = []
            await wait_for(again, is_run_end("resume-1"), into=after)
        reference: list[dict[str, Any]] = []
        await wait_for(steady, is_run_end("resume-1"), into=reference)

        resumed = native(before) + native(after)
        assert resumed == native(reference)
        seqs = [seq for _, seq, _ in resumed]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        text = " ".join(f"w{n}" for n in range(1, 301))
        assert deltas_of(before + after) == text == deltas_of(reference)
        completed = [e for e in after if e["event"] == "session.message.completed"]
        assert completed[-1]["payload"]["message"]["content"][0]["text"] == text
        history = await writer.call("chat.history", {"sessionKey": key})
        assert history["messages"][-1]["content"][0]["text"] == text


async def test_resume_of_an_unknown_session_is_not_found(gw: Daemon) -> None:
    async with GatewayClient(gw.url, token=gw.token) as client:
        with pytest.raises(CallError) as unknown:
            await client.call("sessions.events.subscribe", {"key": "agent:main:never-made", "afterSeq": 3})
        assert unknown.value.code == "NOT_FOUND"
        with pytest.raises(CallError) as unknown_id:
            await client.call("sessions.events.subscribe", {"sessionId": "no-such-id", "afterSeq": 0})
        assert unknown_id.value.code == "NOT_FOUND"


async def prune_deltas(home: Path, session_id: str) -> int:
    """What a retention job does to an old event log: drop the deltas (the completed messages
    keep their content)."""
    store = await Store.open(f"sqlite:///{home / 'gateway.db'}")
    try:
        last = await store.events.last_seq(session_id)
        await store.events.prune(session_id, before_seq=last + 1, types={"message.delta"})
        return await store.events.pruned_seq(session_id)
    finally:
        await store.aclose()


async def test_resume_after_pruning_starts_with_a_snapshot(gateway_home: Path) -> None:
    key = "agent:main:pruned"
    daemon = start_daemon(gateway_home)
    try:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            await client.call("sessions.create", {"key": key})
            await client.call("sessions.events.subscribe", {"key": key})
            await client.call(
                "chat.send", {"sessionKey": key, "message": "!long 20", "idempotencyKey": "p-1"}
            )
            first: list[dict[str, Any]] = []
            await wait_for(client, is_run_end("p-1"), into=first)
            await client.call("chat.send", {"sessionKey": key, "message": "second", "idempotencyKey": "p-2"})
            await wait_for(client, is_run_end("p-2"))
            described = await client.call("sessions.describe", {"key": key})
        # The client saw the first few deltas of the first reply, then went away.
        after_seq = [seq for name, seq, _ in native(first) if name == "session.message.delta"][4]
    finally:
        assert daemon.stop() == 0, daemon.logs()
    assert await prune_deltas(gateway_home, described["sessionId"]) > after_seq

    daemon = start_daemon(gateway_home, tag="again")
    try:
        async with GatewayClient(daemon.url, token=daemon.token) as client:
            answer = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": after_seq})
            assert answer["replay"] == "compacted" and answer["lastSeq"] == described["lastSeq"]
            snapshot = await wait_for(client, lambda e: e["event"].startswith("session."), timeout=5)
            assert snapshot["event"] == "session.snapshot"
            body = snapshot["payload"]
            assert body["sessionSeq"] == described["lastSeq"] and body["partial"] is None
            words = " ".join(f"w{n}" for n in range(1, 21))
            assert [(m["role"], m["content"][0]["text"]) for m in body["messages"]] == [
                ("assistant", words),
                ("user", "second"),
                ("assistant", "echo: second"),
            ]
            # Live events continue right after the snapshot.
            await client.call("chat.send", {"sessionKey": key, "message": "third", "idempotencyKey": "p-3"})
            live: list[dict[str, Any]] = []
            await wait_for(client, is_run_end("p-3"), into=live)
            seqs = [seq for _, seq, _ in native(live)]
            assert seqs == list(range(body["sessionSeq"] + 1, body["sessionSeq"] + 1 + len(seqs)))
            # Before the pruned range an exact replay is still possible.
            exact = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": seqs[-1] - 2})
            assert exact["replay"] == "exact"
    finally:
        assert daemon.stop() == 0, daemon.logs()
