"""`gateway.cluster.leases`: named leases with fencing tokens (PostgreSQL only)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from gateway.cluster.leases import Leases
from sessions.db import Database
from tests.sessions.conftest import needs_postgres

pytestmark = [pytest.mark.postgres, needs_postgres]

TTL_MS = 60_000


async def node_row(db: Database, node_id: str, *, ttl_ms: int = TTL_MS) -> None:
    """Write `node_id`'s heartbeat row, expiring `ttl_ms` from the database's now (negative: it
    expired already)."""
    statement = text(
        """
        INSERT INTO cluster_nodes (node_id, state, started_at, heartbeat_at, expires_at)
        VALUES (:node, 'running', now_ms, now_ms, now_ms + :ttl)
        ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
            expires_at = EXCLUDED.expires_at
        """.replace("now_ms", "(extract(epoch from clock_timestamp()) * 1000)::bigint")
    )
    async with db.write() as conn:
        await conn.execute(statement, {"node": node_id, "ttl": ttl_ms})


async def drop_node(db: Database, node_id: str) -> None:
    async with db.write() as conn:
        await conn.execute(text("DELETE FROM cluster_nodes WHERE node_id = :node"), {"node": node_id})


async def test_a_free_lease_is_taken_held_and_released(database: Database) -> None:
    await node_row(database, "a")
    await node_row(database, "b")
    a, b = Leases(database, node_id="a"), Leases(database, node_id="b")

    token = await a.acquire("channel:discord:main")
    assert token == 1
    assert await a.held("channel:discord:main", token)
    assert not await b.held("channel:discord:main", token)
    assert await a.holders() == {"channel:discord:main": "a"}
    assert await b.acquire("channel:discord:main") is None

    assert not await b.release("channel:discord:main", token)  # not b's to give up
    assert not await a.release("channel:discord:main", token + 1)  # a stale or wrong token
    assert await a.release("channel:discord:main", token)
    assert not await a.held("channel:discord:main", token)
    assert await a.holders() == {}
    assert not await a.release("channel:discord:main", token)  # once only

    # Free again: the next holder gets a higher token, the old one stays refused.
    assert await b.acquire("channel:discord:main") == 2
    assert not await a.held("channel:discord:main", token)
    assert await b.holders() == {"channel:discord:main": "b"}


async def test_a_dead_holders_lease_is_taken_with_a_higher_token(database: Database) -> None:
    await node_row(database, "a")
    await node_row(database, "b")
    a, b = Leases(database, node_id="a"), Leases(database, node_id="b")
    old = await a.acquire("channel:slack:team")
    assert old is not None

    await node_row(database, "a", ttl_ms=-1)  # a missed its heartbeats
    assert not await a.held("channel:slack:team", old)
    assert await b.holders() == {}  # a dead node holds nothing
    new = await b.acquire("channel:slack:team")
    assert new == old + 1
    assert await b.held("channel:slack:team", new)

    # a comes back: b still holds the lease, a's token stays fenced out.
    await node_row(database, "a")
    assert not await a.held("channel:slack:team", old)
    assert await a.acquire("channel:slack:team") is None
    assert not await a.release("channel:slack:team", old)
    assert await b.held("channel:slack:team", new)


async def test_a_holder_whose_row_is_gone_loses_the_lease(database: Database) -> None:
    await node_row(database, "a")
    await node_row(database, "b")
    token = await Leases(database, node_id="a").acquire("channel:discord:main")
    assert token is not None
    await drop_node(database, "a")
    assert await Leases(database, node_id="b").acquire("channel:discord:main") == token + 1


async def test_a_node_without_a_live_row_acquires_nothing(database: Database) -> None:
    a = Leases(database, node_id="a")
    assert await a.acquire("channel:discord:main") is None  # no row at all
    await node_row(database, "a", ttl_ms=-1)
    assert await a.acquire("channel:discord:main") is None  # expired
    await node_row(database, "a")
    assert await a.acquire("channel:discord:main") == 1


async def test_acquiring_a_lease_this_node_holds_raises_the_token(database: Database) -> None:
    """A process restarted under the same node id takes its lease back at once, and the token
    of the process before it is stale from then on."""
    await node_row(database, "a")
    before = await Leases(database, node_id="a").acquire("channel:discord:main")
    assert before is not None
    restarted = Leases(database, node_id="a")
    after = await restarted.acquire("channel:discord:main")
    assert after == before + 1
    assert await restarted.held("channel:discord:main", after)
    assert not await restarted.held("channel:discord:main", before)
    assert not await restarted.release("channel:discord:main", before)


async def test_concurrent_acquires_have_exactly_one_winner(database: Database) -> None:
    await node_row(database, "a")
    await node_row(database, "b")
    a, b = Leases(database, node_id="a"), Leases(database, node_id="b")
    last = 0
    for round_ in range(20):
        name = f"channel:discord:race-{round_ % 4}"  # new names and names released before
        got_a, got_b = await asyncio.gather(a.acquire(name), b.acquire(name))
        winners = [(leases, token) for leases, token in ((a, got_a), (b, got_b)) if token is not None]
        assert len(winners) == 1, (round_, got_a, got_b)
        winner, token = winners[0]
        assert await winner.holders() == {name: winner.node_id}
        assert await winner.release(name, token)
        if round_ >= 4:
            assert token > 1  # the name was leased before: its token only grows
        last = max(last, token)
    assert last == 5  # each of the four names leased five times, one winner each


async def test_leases_refuse_sqlite(tmp_path: object) -> None:
    db = Database.open(f"sqlite:///{tmp_path}/x.db")
    try:
        with pytest.raises(ValueError, match="PostgreSQL"):
            Leases(db, node_id="a")
    finally:
        await db.aclose()
