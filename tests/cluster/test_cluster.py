"""Three `gatewayd` nodes on one PostgreSQL and one Redis: any node serves any client, one node
owns each session, and nothing is lost or repeated when the owner dies."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.client import GatewayClient
from tests.cluster.conftest import LEASE_TTL_S, Cluster, PrivateRedis, needs_cluster
from tests.daemon import Daemon
from tests.e2e.helpers import wait_for
from tests.e2e.test_approvals import RISKY, requested
from tests.reliability._support import (
    Follower,
    assert_contiguous,
    connected,
    event_log,
    native,
    rng,
    text_of,
    tool_message,
)

pytestmark = [needs_cluster, pytest.mark.postgres, pytest.mark.slow]


async def owner_of(cluster: Cluster, key: str) -> str | None:
    """The node the database names as the owner of the session `key`."""
    dsn, _, query = cluster.database_url.replace("postgresql+asyncpg", "postgresql").partition("?")
    schema = query.split("schema=", 1)[1].split("&", 1)[0]
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(
            f'SELECT s.owner_node FROM "{schema}".sessions s JOIN "{schema}".session_keys k '
            "ON k.session_id = s.id WHERE k.key = $1",
            key,
        )
    finally:
        await conn.close()


async def send(client: GatewayClient, key: str, message: str, *, idem: str | None = None) -> str:
    answer = await client.call(
        "chat.send", {"sessionKey": key, "message": message, "idempotencyKey": idem or uuid.uuid4().hex}
    )
    return str(answer["runId"])


async def wait_run(client: GatewayClient, run_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    outcome: dict[str, Any] = await client.call(
        "agent.wait", {"runId": run_id, "timeoutMs": int(timeout_s * 1000)}, timeout=timeout_s + 5
    )
    return outcome


async def follow(client: GatewayClient, key: str) -> Follower:
    answer = await client.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
    follower = Follower(key)
    follower.session_id = str(answer.get("sessionId") or "")
    return follower


async def drain_into(follower: Follower, client: GatewayClient, until_seq: int, timeout_s: float) -> None:
    """Feed `follower` from `client`'s events until it has seen `until_seq`."""
    deadline = time.monotonic() + timeout_s
    while follower.last_seq < until_seq:
        left = deadline - time.monotonic()
        frame = await client.next_event(timeout=max(0.01, left))
        if frame is None:
            raise AssertionError(f"{follower.key}: stopped at seq {follower.last_seq} of {until_seq}")
        event = native(frame)
        if event is None:
            continue
        if not follower.session_id:
            follower.session_id = str(event["sessionId"])
        if event["sessionId"] == follower.session_id:
            follower.take(event)


def counted(daemon: Daemon, name: str) -> float:
    """The sum of the samples of `name` in the node's `GET /metrics`."""
    response = httpx.get(
        daemon.http_url + "/metrics", headers={"Authorization": f"Bearer {daemon.token}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == name
    )


def replies(events: list[dict[str, Any]]) -> list[str]:
    return [
        text_of(e["message"])
        for e in events
        if e["name"] == "message.completed" and e["message"].get("role") == "assistant"
    ]


async def test_any_node_serves_any_client_and_one_node_runs_each_session(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    c = cluster.start("c")
    key = "agent:main:everywhere"
    async with connected(a) as on_a, connected(b) as on_b, connected(c) as on_c:
        watcher = await follow(on_c, key)
        first = await send(on_b, key, "hello from b")
        assert (await wait_run(on_a, first))["status"] == "ok"
        assert await owner_of(cluster, key) == "b"  # the node that took the first input
        # Input on a node that does not own the session: recorded there, run by the owner.
        await on_a.call("sessions.events.subscribe", {"key": key, "afterSeq": 0})
        second = await send(on_a, key, "hello from a")
        assert (await wait_run(on_c, second))["status"] == "ok"
        # OpenClaw's stream events reach clients of a node that does not run the session.
        final = await wait_for(
            on_a,
            lambda f: (
                f.get("event") == "chat"
                and f["payload"].get("runId") == second
                and f["payload"].get("state") == "final"
            ),
        )
        assert "hello from a" in json.dumps(final["payload"])
        assert await owner_of(cluster, key) == "b"
        logged = await event_log(c, key)
        assert_contiguous(logged)
        await drain_into(watcher, on_c, logged[-1]["sessionSeq"], timeout_s=10)
        assert [e["sessionSeq"] for e in watcher.events] == [e["sessionSeq"] for e in logged]
        assert replies(logged) == ["echo: hello from b", "echo: hello from a"]
        # A subscription on another node continues exactly after a seq seen elsewhere.
        middle = logged[len(logged) // 2]["sessionSeq"]
        answer = await on_a.call("sessions.events.subscribe", {"key": key, "afterSeq": middle})
        assert answer["replay"] == "exact"
        # Idempotency keys are cluster-wide: the same key sent to another node is the same input.
        again = await on_c.call(
            "chat.send", {"sessionKey": key, "message": "hello from b", "idempotencyKey": first}
        )
        assert again["runId"] == first
        assert again.get("status") != "started"
        # Every node knows the others, and who owns what.
        status = await on_a.call("cluster.status")
        assert status["clustered"] is True and status["node"] == "a"
        nodes = {n["nodeId"]: n for n in status["nodes"]}
        assert sorted(nodes) == ["a", "b", "c"] and all(n["alive"] for n in nodes.values())
        assert nodes["b"]["sessionsOwned"] == 1
        shown = subprocess.run(
            [sys.executable, "-m", "gateway.cli.gatewayctl", "--url", b.url, "--token", b.token,
             "cluster", "status", "--json"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert sorted(n["nodeId"] for n in json.loads(shown.stdout)["nodes"]) == ["a", "b", "c"]
        health = await on_c.call("health")
        assert health["node"] == "c" and health["cluster"]["clustered"] is True
        row = await on_c.call("sessions.describe", {"key": key})
        assert row["session"]["ownerNode"] == "b"


async def test_sigkill_of_the_owner_mid_stream_fails_over_within_the_lease(cluster: Cluster) -> None:
    nodes = {name: cluster.start(name) for name in ("a", "b", "c")}
    key = "agent:main:failover"
    words = " ".join(f"w{i}" for i in range(400))
    async with connected(nodes["a"]) as on_a:
        run_id = await send(on_a, key, words)
        follower = await follow(on_a, key)
        await drain_into(follower, on_a, 8, timeout_s=20)
    owner = await owner_of(cluster, key)
    assert owner == "a"
    survivors = [d for name, d in nodes.items() if name != owner]
    async with connected(survivors[0]) as on_b, connected(survivors[1]) as on_c:
        watch_b = await follow(on_b, key)
        watch_c = await follow(on_c, key)
        queued = await send(on_c, key, "after the crash")  # queued behind the running reply
        killed_at = time.monotonic()
        nodes["a"].kill()
        outcome = await wait_run(on_b, run_id, timeout_s=LEASE_TTL_S + 20)
        took = time.monotonic() - killed_at
        assert outcome["status"] in {"aborted", "interrupted", "error"}, outcome
        assert took < LEASE_TTL_S + 3, f"failover took {took:.1f} s"
        assert (await wait_run(on_b, queued))["status"] == "ok"
        assert await owner_of(cluster, key) in {"b", "c"}
        logged = await event_log(survivors[0], key)
        assert_contiguous(logged)
        last = logged[-1]["sessionSeq"]
        await drain_into(watch_b, on_b, last, timeout_s=10)
        await drain_into(watch_c, on_c, last, timeout_s=10)
        assert [e["sessionSeq"] for e in watch_b.events] == list(range(1, last + 1))
        assert [e["sessionSeq"] for e in watch_c.events] == list(range(1, last + 1))
        assert replies(logged)[-1] == "echo: after the crash"
        assert replies(logged).count("echo: after the crash") == 1


async def wait_owner_change(cluster: Cluster, key: str, old: str, timeout_s: float) -> tuple[str, float]:
    """The new owner of `key` once it is not `old`, and how long that took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        owner = await owner_of(cluster, key)
        if owner is not None and owner != old:
            return owner, time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{key}: still owned by {old} after {timeout_s} s")


async def test_sigstop_past_the_lease_then_sigcont_writes_nothing_more(cluster: Cluster) -> None:
    """Fencing: the owner paused past its lease loses the session; resumed, it cannot write."""
    nodes = {name: cluster.start(name) for name in ("a", "b")}
    key = "agent:main:paused"
    async with connected(nodes["a"]) as on_a, connected(nodes["b"]) as on_b:
        run_id = await send(on_a, key, " ".join(f"p{i}" for i in range(300)))
        follower = await follow(on_b, key)
        await drain_into(follower, on_b, 6, timeout_s=20)
        assert await owner_of(cluster, key) == "a"
        queued = await send(on_b, key, "while a was paused")
        nodes["a"].proc.send_signal(signal.SIGSTOP)
        try:
            owner, _took = await wait_owner_change(cluster, key, "a", timeout_s=LEASE_TTL_S + 10)
            assert owner == "b"
            assert (await wait_run(on_b, queued))["status"] == "ok"
            before = await event_log(nodes["b"], key)
        finally:
            nodes["a"].proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(LEASE_TTL_S)  # a's journal tries its pending writes: all refused
        after = await event_log(nodes["b"], key)
        assert_contiguous(after)
        assert after == before, "the paused node wrote after it lost the session"
        interrupted = await wait_run(on_b, run_id)
        assert interrupted["status"] in {"aborted", "interrupted", "error"}
        assert replies(after).count("echo: while a was paused") == 1
        assert "refused" in nodes["a"].logs()


@pytest.mark.timeout(600)  # twenty failovers of up to lease_ttl_s each, on a loaded machine
async def test_twenty_seeded_kills_lose_nothing_and_repeat_nothing(cluster: Cluster) -> None:
    random = rng("cluster-kills")
    kills = int(os.environ.get("GATEWAY_CLUSTER_KILLS", "20"))
    names = ["a", "b", "c"]
    for name in names:
        cluster.start(name)
    worst = 0.0
    for cycle in range(kills):
        key = f"agent:main:kill-{cycle}"
        entry = random.choice(names)  # the node the first message goes to: the owner
        others = [n for n in names if n != entry]
        after_events = random.randint(3, 40)
        async with (
            connected(cluster.nodes[entry]) as on_entry,
            connected(cluster.nodes[others[0]]) as on_x,
            connected(cluster.nodes[others[1]]) as on_y,
        ):
            watch_x = await follow(on_x, key)
            watch_y = await follow(on_y, key)
            run_id = await send(on_entry, key, " ".join(f"k{cycle}-{i}" for i in range(200)))
            await drain_into(watch_x, on_x, after_events, timeout_s=30)
            assert await owner_of(cluster, key) == entry
            followup = await send(on_y, key, f"follow-up {cycle}")
            await asyncio.sleep(random.random() * 0.01)
            cluster.nodes[entry].kill()
            _owner, took = await wait_owner_change(cluster, key, entry, timeout_s=LEASE_TTL_S + 15)
            worst = max(worst, took)
            assert (await wait_run(on_x, run_id))["status"] in {"aborted", "interrupted", "error"}
            assert (await wait_run(on_y, followup))["status"] == "ok"
            logged = await event_log(cluster.nodes[others[0]], key)
            assert_contiguous(logged, what=f"cycle {cycle} ({key}, kill after {after_events})")
            last = logged[-1]["sessionSeq"]
            await drain_into(watch_x, on_x, last, timeout_s=15)
            await drain_into(watch_y, on_y, last, timeout_s=15)
            assert replies(logged).count(f"echo: follow-up {cycle}") == 1
        cluster.start(entry)  # the killed node comes back under its name
    assert worst < LEASE_TTL_S + 1.0, f"slowest failover {worst:.2f} s"


async def test_redis_restarted_mid_stream_leaves_no_hole(cluster: Cluster, tmp_path: Path) -> None:
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    cluster.redis_url = redis.url
    try:
        a = cluster.start("a")
        b = cluster.start("b")
        key = "agent:main:redis-restart"
        async with connected(a) as on_a, connected(b) as on_b:
            watcher = await follow(on_b, key)
            run_id = await send(on_a, key, " ".join(f"r{i}" for i in range(150)))
            await drain_into(watcher, on_b, 5, timeout_s=20)
            redis.stop()
            await asyncio.sleep(0.5)
            redis.start()
            assert (await wait_run(on_b, run_id))["status"] == "ok"
            logged = await event_log(a, key)
            await drain_into(watcher, on_b, logged[-1]["sessionSeq"], timeout_s=15)
            assert [e["sessionSeq"] for e in watcher.events] == [e["sessionSeq"] for e in logged]
            # And the bus works again: a second reply streams to b as it happens.
            second = await send(on_b, key, "after the restart")
            assert (await wait_run(on_b, second))["status"] == "ok"
            logged = await event_log(a, key)
            await drain_into(watcher, on_b, logged[-1]["sessionSeq"], timeout_s=15)
            assert replies(watcher.events)[-1] == "echo: after the restart"
    finally:
        redis.stop()


async def test_sigterm_drains_and_hands_queued_inputs_over_at_once(cluster: Cluster) -> None:
    """A node stopping gracefully lets its run end within the grace period and releases its
    sessions: another node runs the input queued behind it without waiting out the lease."""
    cluster.lease_ttl_s = 60.0  # far longer than the test: only the release can hand over
    cluster.extra_config = "[gateway]\nshutdown_grace_s = 0.5\n"
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:drain"
    async with connected(a) as on_a, connected(b) as on_b:
        run_id = await send(on_a, key, " ".join(f"d{i}" for i in range(400)))
        follower = await follow(on_b, key)
        await drain_into(follower, on_b, 5, timeout_s=20)
        queued = await on_b.call(
            "chat.send",
            {
                "sessionKey": key,
                "message": "after the drain",
                "idempotencyKey": uuid.uuid4().hex,
                "queueMode": "followup",
            },
        )
        stopped_at = time.monotonic()
        assert a.stop() == 0
        outcome = await wait_run(on_b, queued["runId"], timeout_s=20)
        took = time.monotonic() - stopped_at
        assert outcome["status"] == "ok"
        assert took < 10, f"the queued input waited {took:.1f} s"
        assert await owner_of(cluster, key) == "b"
        first = await wait_run(on_b, run_id)
        assert first["status"] in {"aborted", "interrupted"}
        logged = await event_log(b, key)
        assert_contiguous(logged)
        assert replies(logged).count("echo: after the drain") == 1
        status = await on_b.call("cluster.status")
        assert [n["nodeId"] for n in status["nodes"] if n["alive"]] == ["b"]


async def test_postgresql_connections_reset_mid_stream_lose_nothing(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:pg-reset"
    schema = cluster.database_url.split("schema=", 1)[1]
    dsn = cluster.database_url.replace("postgresql+asyncpg", "postgresql").partition("?")[0]
    async with connected(a) as on_a, connected(b) as on_b:
        watcher = await follow(on_b, key)
        run_id = await send(on_a, key, " ".join(f"g{i}" for i in range(200)))
        await drain_into(watcher, on_b, 5, timeout_s=20)
        admin = await asyncpg.connect(dsn)
        try:
            for _ in range(3):  # every connection of both nodes, three times during the reply
                killed = await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = $1",
                    f"agent-gateway/{schema}",
                )
                assert killed > 0
                await asyncio.sleep(0.3)
        finally:
            await admin.close()
        assert (await wait_run(on_b, run_id))["status"] == "ok"
        logged = await event_log(b, key)
        assert_contiguous(logged)
        await drain_into(watcher, on_b, logged[-1]["sessionSeq"], timeout_s=15)
        assert [e["sessionSeq"] for e in watcher.events] == [e["sessionSeq"] for e in logged]
        assert await owner_of(cluster, key) == "a"  # the heartbeats survived: no takeover


async def test_an_approval_is_seen_and_decided_from_another_node_and_cancelled_on_failover(
    cluster: Cluster,
) -> None:
    cluster.extra_config = '[[agents]]\nid = "main"\napprovals = "risky"\napproval_timeout_s = 60\n'
    a = cluster.start("a")
    b = cluster.start("b")
    async with connected(a) as on_a, connected(b) as on_b:
        key = "agent:main:approve-elsewhere"
        await send(on_a, key, tool_message("bash", {"command": RISKY}), idem=key)
        request = await requested(on_b, key)  # announced to b's clients too
        assert request["status"] == "pending" and request["command"] == RISKY
        listed = await on_b.call("exec.approval.list")
        assert [r["id"] for r in listed["approvals"]] == [request["id"]]
        answer = await on_b.call("exec.approval.resolve", {"id": request["id"], "decision": "allow-once"})
        assert answer["applied"] is True
        assert (await wait_run(on_b, key))["status"] == "ok"  # the call waiting on a went on
        finished = [e for e in await event_log(a, key) if e["name"] == "tool.finished"]
        assert len(finished) == 1 and finished[0]["isError"] is False

        # A request left pending by a node that dies is cancelled by the node that takes over.
        key = "agent:main:approve-then-die"
        await send(on_a, key, tool_message("bash", {"command": RISKY}), idem=key)
        request = await requested(on_b, key)
        a.kill()
        outcome = await wait_run(on_b, key, timeout_s=LEASE_TTL_S + 15)
        assert outcome["status"] in {"aborted", "interrupted", "error"}
        ended = await on_b.call("exec.approval.get", {"id": request["id"]})
        assert ended["approval"]["status"] == "cancelled"


async def test_history_changing_operations_on_another_node_move_the_session_there(cluster: Cluster) -> None:
    """inject, compact, reset... run on the session's lane: a node asked for one takes the
    session from its owner once the owner is idle (after the run in progress), then applies it."""
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:moved"
    async with connected(a) as on_a, connected(b) as on_b:
        first = await send(on_b, key, " ".join(f"m{i}" for i in range(60)))
        injected = await on_a.call("chat.inject", {"sessionKey": key, "message": "noted by a"})
        assert injected["ok"] is True
        assert (await wait_run(on_a, first))["status"] == "ok"  # the run finished on b first
        assert await owner_of(cluster, key) == "a"
        logged = await event_log(b, key)
        assert_contiguous(logged)
        assert replies(logged)[-1] == "noted by a"
        again = await send(on_b, key, "and on")  # b is no longer the owner: a runs it
        assert (await wait_run(on_b, again))["status"] == "ok"
        assert await owner_of(cluster, key) == "a"
        assert replies(await event_log(b, key))[-1] == "echo: and on"


async def test_a_run_is_aborted_from_a_node_that_does_not_run_it(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:abort-elsewhere"
    async with connected(a) as on_a, connected(b) as on_b:
        run_id = await send(on_a, key, " ".join(f"x{i}" for i in range(400)))
        follower = await follow(on_b, key)
        # Up to the reply's first word: status, agent and turn start, the prompt (two events),
        # the reply's start, then its deltas.
        await drain_into(follower, on_b, 7, timeout_s=20)
        assert follower.events[-1]["name"] == "message.delta", follower.events
        # The text streamed so far, as chat.history on another node shows it.
        history = await on_b.call("chat.history", {"sessionKey": key})
        assert history["inFlightRun"]["runId"] == run_id
        streamed = history["inFlightRun"]["text"]
        full = "echo: " + " ".join(f"x{i}" for i in range(400))
        assert streamed and full.startswith(streamed), streamed
        answer = await on_b.call("chat.abort", {"sessionKey": key, "runId": run_id})
        assert answer["aborted"] is True and answer["runIds"] == [run_id]
        outcome = await wait_run(on_b, run_id, timeout_s=10)
        assert outcome["status"] == "aborted", outcome
        assert await owner_of(cluster, key) == "a"  # stopped where it ran


async def test_a_run_is_counted_and_traced_by_the_node_that_runs_it_only(cluster: Cluster) -> None:
    """Metrics are per node: a node that relays another node's events to its clients does not
    count that node's runs as its own (summing the nodes' counters counts each run once)."""
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:counted-once"
    async with connected(a) as on_a, connected(b) as on_b:
        follower = await follow(on_b, key)  # b relays the run's events to a client of its own
        run_id = await send(on_a, key, "count me once")
        assert (await wait_run(on_b, run_id))["status"] == "ok"
        last = int((await on_b.call("sessions.describe", {"key": key}))["lastSeq"])
        await drain_into(follower, on_b, last, timeout_s=20)
        assert await owner_of(cluster, key) == "a"
    nodes = (("a", a), ("b", b))
    assert {name: counted(node, "gateway_runs_started_total") for name, node in nodes} == {"a": 1, "b": 0}
    published = {name: counted(node, "gateway_events_published_total") for name, node in nodes}
    assert published == {"a": last, "b": 0}


async def test_session_list_changes_on_one_node_reach_the_lists_of_the_others(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    key = "agent:main:listed"
    async with connected(a) as on_a, connected(b) as on_b:
        await on_a.call("sessions.subscribe", {})
        first = await send(on_b, key, "hello")
        assert (await wait_run(on_b, first))["status"] == "ok"
        await on_b.call("sessions.patch", {"key": key, "label": "renamed on b"})
        changed = await wait_for(
            on_a,
            lambda f: (
                f.get("event") == "sessions.changed"
                and f["payload"].get("sessionKey") == key
                and f["payload"].get("reason") == "patch"
            ),
        )
        assert changed["payload"]["session"]["label"] == "renamed on b"
        assert changed["payload"]["session"]["ownerNode"] == "b"
