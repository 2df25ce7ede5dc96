"""PostgreSQL connections of a cluster node end a transaction left idle too long."""

from __future__ import annotations

import asyncio

import pytest

from sessions.errors import StoreUnavailable
from sessions.store import open_database
from tests.sessions.conftest import needs_postgres, postgres_schema


@needs_postgres
async def test_a_transaction_left_idle_past_the_timeout_is_ended_by_the_server() -> None:
    """A cluster node's connections carry `idle_in_transaction_session_timeout`: one paused in
    the middle of a commit loses its transaction (and its row locks) instead of holding them."""
    async with postgres_schema() as url:
        db = await open_database(url, idle_transaction_timeout_ms=300)
        try:
            with pytest.raises(StoreUnavailable):
                async with db.write_direct() as tx:
                    await tx.fetch("SELECT id FROM sessions FOR UPDATE")
                    await asyncio.sleep(1.0)  # stopped mid-transaction
                    await tx.fetch("SELECT 1")
            async with db.write_direct() as tx:  # the pool hands out a working connection again
                assert await tx.fetch("SELECT 1") == [(1,)]
        finally:
            await db.aclose()
