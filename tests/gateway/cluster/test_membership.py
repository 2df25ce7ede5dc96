"""`gateway.cluster.membership`: a node's heartbeat row, as the other nodes see it (PostgreSQL)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gateway.cluster.membership import Membership, MemberState, NodeRow, NodeState, holdings
from gateway.methods.cluster_methods import clustered_status
from sessions import Store
from sessions.db import Database
from sessions.store import open_database
from tests.sessions.conftest import needs_postgres

pytestmark = [pytest.mark.postgres, needs_postgres]


@pytest.fixture
async def members(database: Database) -> AsyncIterator[Callable[..., Membership]]:
    """Builds memberships on the test's database; each is closed after the test."""
    made: list[Membership] = []

    def make(node_id: str, *, ttl_s: float = 10.0, **kwargs: Any) -> Membership:
        kwargs.setdefault("info", lambda: {"runs": 0})
        member = Membership(database, node_id=node_id, ttl_s=ttl_s, **kwargs)
        made.append(member)
        return member

    yield make
    for member in made:
        await member.aclose()


async def row_of(member: Membership, node_id: str) -> NodeRow | None:
    return next((node for node in await member.nodes() if node.node_id == node_id), None)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_join_writes_a_running_row_on_the_database_clock(members: Callable[..., Membership]) -> None:
    member = members("node-a", info=lambda: {"runs": 3, "liveSessions": 7})
    await member.join()
    now = await member.db_now_ms()
    row = await row_of(member, "node-a")
    assert row is not None
    assert row.state is NodeState.RUNNING and row.alive
    assert row.info == {"runs": 3, "liveSessions": 7}
    assert member.started_at == row.started_at
    assert now - 5_000 < row.started_at <= now
    assert 0 <= row.heartbeat_age_ms < 5_000
    assert row.expires_at - row.started_at == pytest.approx(10_000, abs=50)
    assert member.alive and member.state is MemberState.RUNNING


async def test_the_heartbeat_renews_the_row_and_its_info(members: Callable[..., Membership]) -> None:
    beats = 0

    def info() -> dict[str, Any]:
        nonlocal beats
        beats += 1
        return {"beats": beats}

    member = members("node-a", ttl_s=1.0, info=info)
    await member.join()
    first = await row_of(member, "node-a")
    assert first is not None
    await asyncio.sleep(1.6)  # past the ttl: only renewals keep the row alive
    later = await row_of(member, "node-a")
    assert later is not None and later.alive
    assert later.expires_at > first.expires_at + 1_000
    assert later.heartbeat_age_ms < 1_000
    assert later.info["beats"] >= 4  # every ttl/4 = 0.25 s
    assert later.started_at == first.started_at
    assert member.alive
    assert [n.node_id for n in member.last_nodes] == ["node-a"]
    assert member.alive_count() == 1


async def test_a_node_that_stops_beating_expires_for_the_others(members: Callable[..., Membership]) -> None:
    a = members("node-a", ttl_s=1.0)
    b = members("node-b")
    await a.join()
    await b.join()
    assert (await row_of(b, "node-a")) is not None and (await row_of(b, "node-a")).alive  # type: ignore[union-attr]
    await a.aclose()  # a crash: the row stays until it expires
    assert not a.alive

    async def expired() -> bool:
        row = await row_of(b, "node-a")
        return row is not None and not row.alive

    await eventually(expired, timeout=3.0)
    row = await row_of(b, "node-a")
    assert row is not None and row.heartbeat_age_ms >= 1_000


async def test_drain_and_leave_are_seen_by_the_others_and_idempotent(
    members: Callable[..., Membership],
) -> None:
    a = members("node-a", ttl_s=1.0)
    b = members("node-b")
    await a.join()
    await b.join()
    await a.drain()
    await a.drain()
    row = await row_of(b, "node-a")
    assert row is not None and row.state is NodeState.DRAINING and row.alive
    await asyncio.sleep(0.6)  # a heartbeat does not turn it back to running
    row = await row_of(b, "node-a")
    assert row is not None and row.state is NodeState.DRAINING
    await a.leave()
    await a.leave()
    assert await row_of(b, "node-a") is None
    await asyncio.sleep(0.6)  # no heartbeat writes it back
    assert [n.node_id for n in await b.nodes()] == ["node-b"]
    assert a.state is MemberState.OUTSIDE and not a.alive


async def test_two_nodes_are_listed_with_what_they_hold(
    database: Database, members: Callable[..., Membership]
) -> None:
    a = members("node-a", info=lambda: {"runs": 1, "liveSessions": 2})
    b = members("node-b", info=lambda: {"runs": 0, "liveSessions": 5})
    await b.join()
    await a.join()
    nodes = await a.nodes()
    assert [(n.node_id, n.state, n.alive) for n in nodes] == [
        ("node-a", NodeState.RUNNING, True),
        ("node-b", NodeState.RUNNING, True),
    ]
    assert nodes[1].info == {"runs": 0, "liveSessions": 5}

    store = Store(database)
    ids = [(await store.tree.create_session(agent_id="main", key=f"agent:main:s{i}")).id for i in range(4)]
    async with database.write() as conn:
        own = text("UPDATE sessions SET owner_node = :node WHERE id = :id")
        for node, session_id in (("node-a", ids[0]), ("node-a", ids[1]), ("node-b", ids[2])):
            await conn.execute(own, {"node": node, "id": session_id})
        await conn.execute(
            text(
                "INSERT INTO leases (name, holder, token) VALUES "
                "('channel:discord:main', 'node-b', 1), ('channel:slack:ops', 'node-b', 2), "
                "('channel:slack:old', NULL, 3)"
            )
        )
    held = await holdings(database)
    assert held.sessions == {"node-a": 2, "node-b": 1}
    assert held.unowned == 1
    assert held.leases == {"node-b": ["channel:discord:main", "channel:slack:ops"]}


async def test_a_restart_under_the_same_id_takes_the_row_and_fences_the_old_process(
    members: Callable[..., Membership],
) -> None:
    lost: list[int | None] = []
    old = members("node-a", ttl_s=1.0)
    old.on_lost = lambda: lost.append(old.lost_at)
    await old.join()
    new = members("node-a", ttl_s=10.0)
    await new.join()
    assert new.started_at is not None and old.started_at is not None
    assert new.started_at > old.started_at

    async def old_lost() -> bool:
        return old.state is MemberState.LOST

    await eventually(old_lost, timeout=3.0)
    assert not old.alive and old.lost_at is not None and lost == [old.lost_at]
    await old.leave()  # the row is the new process's now: left alone
    row = await row_of(new, "node-a")
    assert row is not None and row.alive and row.started_at == new.started_at
    assert new.alive


async def test_a_stalled_database_loses_the_membership_after_the_ttl(
    database: Database, members: Callable[..., Membership]
) -> None:
    lost: list[bool] = []
    member = members("node-a", ttl_s=1.0, on_lost=lambda: lost.append(True))
    await member.join()
    async with database.write() as conn:  # holds the row's lock: every renewal waits on it
        await conn.execute(text("SELECT node_id FROM cluster_nodes WHERE node_id = 'node-a' FOR UPDATE"))
        started = time.monotonic()
        while member.alive:
            await asyncio.sleep(0.02)
        waited = time.monotonic() - started
        assert 0.3 < waited < 1.5  # the ttl after the last renewal sent

        async def reported() -> bool:
            return lost == [True]

        await eventually(reported, timeout=2.0)
    assert member.state is MemberState.LOST and member.lost_at is not None
    await member.join()  # a new incarnation
    assert member.alive and member.state is MemberState.RUNNING


async def test_join_refuses_a_second_join_and_sqlite(
    members: Callable[..., Membership], gateway_home: Path
) -> None:
    member = members("node-a")
    await member.join()
    with pytest.raises(RuntimeError, match="expected outside or lost"):
        await member.join()
    sqlite = await open_database(f"sqlite+aiosqlite:///{gateway_home / 'one.db'}")
    try:
        with pytest.raises(ValueError, match="PostgreSQL"):
            Membership(sqlite, node_id="x", ttl_s=1.0, info=dict)
    finally:
        await sqlite.aclose()


async def test_cluster_status_lists_every_node_with_its_holdings(
    database: Database, members: Callable[..., Membership]
) -> None:
    a = members("node-a", info=lambda: {"runs": 1, "liveSessions": 2, "host": "h1", "pid": 11})
    b = members("node-b", info=lambda: {"runs": 0, "liveSessions": 5})
    gone = members("node-c", ttl_s=1.0, info=dict)
    for member in (a, b, gone):
        await member.join()
    await gone.aclose()  # crashed: listed until its row is removed, not alive once it expired
    await b.drain()
    store = Store(database)
    session = await store.tree.create_session(agent_id="main", key="agent:main:main")
    await store.tree.create_session(agent_id="main", key="agent:main:other")
    async with database.write() as conn:
        await conn.execute(
            text("UPDATE sessions SET owner_node = 'node-a' WHERE id = :id"), {"id": session.id}
        )
        await conn.execute(
            text("INSERT INTO leases (name, holder, token) VALUES ('channel:slack:ops', 'node-b', 1)")
        )

    async def c_expired() -> bool:
        return not (await row_of(a, "node-c") or pytest.fail("node-c is gone")).alive

    await eventually(c_expired, timeout=3.0)
    answer = await clustered_status(a, database)
    assert answer["clustered"] is True and answer["node"] == "node-a"
    assert answer["sessionsUnowned"] == 1
    nodes = {node["nodeId"]: node for node in answer["nodes"]}
    assert list(nodes) == ["node-a", "node-b", "node-c"]
    assert {
        k: nodes["node-a"][k] for k in ("state", "alive", "sessionsOwned", "channelAccounts", "runs")
    } == {
        "state": "running",
        "alive": True,
        "sessionsOwned": 1,
        "channelAccounts": [],
        "runs": 1,
    }
    assert nodes["node-a"]["liveSessions"] == 2 and nodes["node-a"]["host"] == "h1"
    assert nodes["node-b"]["state"] == "draining" and nodes["node-b"]["alive"] is True
    assert (
        nodes["node-b"]["channelAccounts"] == ["channel:slack:ops"] and nodes["node-b"]["sessionsOwned"] == 0
    )
    assert nodes["node-b"]["runs"] == 0 and nodes["node-b"]["liveSessions"] == 5
    assert nodes["node-c"]["alive"] is False and nodes["node-c"]["heartbeatAgeMs"] >= 1_000
    assert nodes["node-c"]["runs"] is None  # it reported no runs
    assert isinstance(nodes["node-a"]["startedAt"], int) and nodes["node-a"]["heartbeatAgeMs"] < 5_000
