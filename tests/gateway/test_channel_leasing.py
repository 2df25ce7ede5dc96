"""`gateway.channel_leasing`: a chat account runs on the one node holding its lease, and moves
when that node dies or stops (real PostgreSQL; only the bindings' start and stop are recorded)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from gateway.channel_leasing import ChannelLeasing, lease_name
from gateway.cluster.leases import Leases
from sessions.store import open_database
from tests.gateway.cluster.test_leases import node_row
from tests.sessions.conftest import needs_postgres, postgres_schema

pytestmark = [pytest.mark.postgres, needs_postgres]

ACCOUNT = "discord:main"
TTL_S = 1.0
INTERVAL_S = TTL_S / 4


class Bindings:
    """What a node did with its bindings, in order: ("start" | "stop", binding id)."""

    def __init__(self, *, failing_starts: int = 0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.running: set[str] = set()
        self._failing_starts = failing_starts

    async def start(self, binding_id: str) -> None:
        self.calls.append(("start", binding_id))
        if self._failing_starts:
            self._failing_starts -= 1
            raise RuntimeError("the platform refused the connection")
        self.running.add(binding_id)

    async def stop(self, binding_id: str) -> None:
        self.calls.append(("stop", binding_id))
        self.running.discard(binding_id)


class Heartbeats:
    """Keeps the rows of the nodes in `alive` renewed every ttl/10 (the membership's job)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.alive: set[str] = set()

    async def run(self) -> None:
        db = await open_database(self.url)
        try:
            while True:
                for node in sorted(self.alive):
                    await node_row(db, node, ttl_ms=int(TTL_S * 1000))
                await asyncio.sleep(TTL_S / 10)
        finally:
            await db.aclose()


@pytest.fixture
async def schema_url() -> AsyncIterator[str]:
    async with postgres_schema() as url:
        yield url


@pytest.fixture
async def heartbeats(schema_url: str) -> AsyncIterator[Heartbeats]:
    beats = Heartbeats(schema_url)
    # The schema is migrated before anyone writes a row.
    await (await open_database(schema_url)).aclose()
    task = asyncio.create_task(beats.run())
    try:
        yield beats
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def node(
    url: str, node_id: str, bindings: Bindings, *, ttl_s: float = TTL_S
) -> AsyncIterator[ChannelLeasing]:
    """A node's leasing of `ACCOUNT` and `slack:team` on a database of its own."""
    db = await open_database(url)
    leasing = ChannelLeasing(
        Leases(db, node_id=node_id),
        [ACCOUNT, "slack:team"],
        start=bindings.start,
        stop=bindings.stop,
        ttl_s=ttl_s,
        interval_s=INTERVAL_S,
    )
    try:
        yield leasing
    finally:
        await leasing.aclose()
        await db.aclose()


async def wait_until(condition: object, *, within_s: float) -> float:
    """Seconds until `condition()` held; fails the test past `within_s`."""
    assert callable(condition)
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within_s, "timed out"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def holders(url: str) -> dict[str, str]:
    db = await open_database(url)
    try:
        return await Leases(db, node_id="observer").holders()
    finally:
        await db.aclose()


async def test_one_node_runs_the_account_and_the_other_takes_over_when_it_dies(
    schema_url: str, heartbeats: Heartbeats
) -> None:
    heartbeats.alive |= {"a", "b"}
    await asyncio.sleep(TTL_S / 5)
    a_bindings, b_bindings = Bindings(), Bindings()
    async with node(schema_url, "a", a_bindings) as a:
        a.start()
        await wait_until(lambda: a_bindings.running == {ACCOUNT, "slack:team"}, within_s=2)
        async with node(schema_url, "b", b_bindings) as b:
            b.start()
            await wait_until(lambda: b.holder(ACCOUNT) == "a", within_s=2)
            await asyncio.sleep(3 * INTERVAL_S)  # b keeps trying, and keeps standing by
            assert b_bindings.calls == []
            assert not b.running(ACCOUNT) and a.running(ACCOUNT)
            assert a.holder(ACCOUNT) == "a"
            assert await holders(schema_url) == {lease_name(ACCOUNT): "a", "channel:slack:team": "a"}

            heartbeats.alive.discard("a")  # a pauses: its row is no longer renewed
            took = await wait_until(lambda: b_bindings.running == {ACCOUNT, "slack:team"}, within_s=4)
            assert took <= TTL_S + 2 * INTERVAL_S + 0.5
            # a sees its lease gone at its next pass and disconnects.
            await wait_until(lambda: not a_bindings.running, within_s=2 * INTERVAL_S + 0.5)
            assert a_bindings.calls == [
                ("start", ACCOUNT),
                ("start", "slack:team"),
                ("stop", ACCOUNT),
                ("stop", "slack:team"),
            ]
            assert b.holder(ACCOUNT) == "b"
            await wait_until(lambda: a.holder(ACCOUNT) == "b", within_s=2)

            # a is back: b keeps the accounts.
            heartbeats.alive.add("a")
            await asyncio.sleep(4 * INTERVAL_S)
            assert not a_bindings.running
            assert b_bindings.running == {ACCOUNT, "slack:team"}


async def test_a_graceful_stop_disconnects_then_hands_over_at_once(
    schema_url: str, heartbeats: Heartbeats
) -> None:
    heartbeats.alive |= {"a", "b"}
    await asyncio.sleep(TTL_S / 5)
    a_bindings, b_bindings = Bindings(), Bindings()
    # A ttl far longer than the test: b can only take the accounts because a released them.
    async with node(schema_url, "b", b_bindings, ttl_s=60) as b:
        async with node(schema_url, "a", a_bindings, ttl_s=60) as a:
            a.start()
            await wait_until(lambda: len(a_bindings.running) == 2, within_s=2)
            b.start()
            await wait_until(lambda: b.holder(ACCOUNT) == "a", within_s=2)
        assert a_bindings.calls[-2:] == [("stop", ACCOUNT), ("stop", "slack:team")]
        took = await wait_until(lambda: len(b_bindings.running) == 2, within_s=2)
        assert took <= 2 * INTERVAL_S + 0.3
        assert await holders(schema_url) == {lease_name(ACCOUNT): "b", "channel:slack:team": "b"}
    assert await holders(schema_url) == {}  # b released them too


async def test_a_binding_that_fails_to_start_gives_its_lease_back_and_is_tried_again(
    schema_url: str, heartbeats: Heartbeats
) -> None:
    heartbeats.alive.add("a")
    await asyncio.sleep(TTL_S / 5)
    bindings = Bindings(failing_starts=1)
    async with node(schema_url, "a", bindings) as a:
        await a.run_pass()
        assert bindings.calls == [("start", ACCOUNT), ("start", "slack:team")]
        assert bindings.running == {"slack:team"}
        assert not a.running(ACCOUNT)
        assert await holders(schema_url) == {"channel:slack:team": "a"}
        await a.run_pass()
        assert bindings.running == {ACCOUNT, "slack:team"}


async def test_a_node_that_cannot_confirm_its_lease_disconnects_after_a_ttl(
    schema_url: str, heartbeats: Heartbeats
) -> None:
    heartbeats.alive.add("a")
    await asyncio.sleep(TTL_S / 5)
    bindings = Bindings()
    async with node(schema_url, "a", bindings) as a:
        a.start()
        await wait_until(lambda: bindings.running == {ACCOUNT, "slack:team"}, within_s=2)
        admin = await open_database(schema_url)
        try:
            async with admin.write() as conn:  # every lease query of the node fails from now on
                await conn.execute(text("ALTER TABLE leases RENAME TO leases_away"))
            took = await wait_until(lambda: not bindings.running, within_s=3)
            assert TTL_S - 2 * INTERVAL_S <= took <= TTL_S + 2 * INTERVAL_S
            assert sorted(bindings.calls) == [
                ("start", ACCOUNT),
                ("start", "slack:team"),
                ("stop", ACCOUNT),
                ("stop", "slack:team"),
            ]
            async with admin.write() as conn:
                await conn.execute(text("ALTER TABLE leases_away RENAME TO leases"))
            # Its lease still names it (its row is alive): the next pass takes it back.
            await wait_until(lambda: bindings.running == {ACCOUNT, "slack:team"}, within_s=2)
        finally:
            await admin.aclose()
