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
