"""A clustered session manager on PostgreSQL (the other nodes are rows of `cluster_nodes` and the
bus is the network edge, recorded here): sessions this node no longer uses go back to nobody, and
the node takes them again, with a higher fencing token, when an input comes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from sqlalchemy import text

from sessions.manager import SessionManager
from sessions.ownership import DB_NOW_MS, Ownership
from sessions.placement import WAKE_GRACE_MS
from sessions.store import Store
from tests.sessions.conftest import needs_postgres, postgres_schema
from tests.sessions.manager_support import FAST, Directory, Recorder, StreamLog

pytestmark = [needs_postgres, pytest.mark.postgres]


@dataclass
class Bus:
    """What this node would send to the others."""

    sent: list[tuple[str, str, str]] = field(default_factory=list)

    def wake(self, node: str, session_id: str, idempotency_key: str) -> None:
        self.sent.append(("wake", node, session_id))

    def abort(self, node: str, session_id: str, run_id: str | None, reason: str) -> None:
        self.sent.append(("abort", node, session_id))

    def release(self, node: str, session_id: str) -> None:
        self.sent.append(("release", node, session_id))


@pytest.fixture
async def node() -> AsyncIterator[tuple[Store, SessionManager, Ownership]]:
    async with postgres_schema() as url:
        store = await Store.open(url)
        try:
            async with store.database.write() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO cluster_nodes (node_id, state, started_at, heartbeat_at, expires_at) "
                        f"VALUES ('n1', 'running', 0, 0, {DB_NOW_MS} + 600000)"
                    )
                )
            manager = SessionManager(
                store, directory=Directory(), publisher=Recorder(), settings=FAST, stream_fn=StreamLog()
            )
            ownership = Ownership(store.database, "n1")
            manager.join_cluster(ownership, Bus())
            await manager.start()
            try:
                yield store, manager, ownership
            finally:
                await manager.aclose(grace_s=0.0)
        finally:
            await store.aclose()


async def _owner(store: Store, session_id: str) -> tuple[str | None, int]:
    async with store.database.read() as conn:
        row = (
            await conn.execute(
                text("SELECT owner_node, owner_token FROM sessions WHERE id = :id"), {"id": session_id}
            )
        ).one()
    return row[0], int(row[1])


async def test_a_session_unused_here_goes_back_and_is_taken_again_with_a_new_token(
    node: tuple[Store, SessionManager, Ownership],
) -> None:
    store, manager, ownership = node
    placement = manager.placement
    assert placement is not None
    session = await manager.ensure_session("agent:main:unused")
    await manager.submit(session=session, message="first", idempotency_key="k1")
    assert (await manager.wait_run("k1", 10) or {}).get("status") == "ok"
    owner, token = await _owner(store, session.id)
    assert owner == "n1" and ownership.owns(session.id)

    placement.release_unused_s = 0.2
    await asyncio.sleep(0.3)
    await placement.sweep()
    assert ownership.owns(session.id), "a live session stays"
    manager.forget(session.id)  # what eviction of an idle live session does
    await asyncio.sleep(0.3)
    await placement.sweep()
    assert not ownership.owns(session.id) and len(ownership) == 0
    assert await _owner(store, session.id) == (None, token)

    await manager.submit(session=session, message="second", idempotency_key="k2")
    assert (await manager.wait_run("k2", 10) or {}).get("status") == "ok"
    assert await _owner(store, session.id) == ("n1", token + 1)


async def test_an_input_whose_wake_up_was_lost_runs_at_a_sweep(
    node: tuple[Store, SessionManager, Ownership],
) -> None:
    """Another node recorded an input for a session this node owns, and its wake-up never came
    (Redis was away): the sweep runs it once it has waited `WAKE_GRACE_MS`."""
    store, manager, _ownership = node
    placement = manager.placement
    assert placement is not None
    session = await manager.ensure_session("agent:main:lost-wake")
    await manager.submit(session=session, message="first", idempotency_key="w1")
    assert (await manager.wait_run("w1", 10) or {}).get("status") == "ok"
    await store.inputs.record(
        "w2", session_id=session.id, payload={"role": "user", "content": "second"}, run_id="w2"
    )
    await placement.sweep()
    waiting = await store.inputs.get("w2")
    assert waiting is not None and waiting.status == "queued"  # not before the grace
    await asyncio.sleep(WAKE_GRACE_MS / 1000 + 0.2)
    await placement.sweep()
    await placement.sweep()  # a second sweep must not run it again
    assert (await manager.wait_run("w2", 10) or {}).get("status") == "ok"
    runs = await store.events.read(session.id, after_seq=0, limit=1000)
    assert sum(1 for e in runs if e.type == "agent.finished" and e.run_id == "w2") == 1
