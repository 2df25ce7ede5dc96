"""Store fixtures: every store test runs on SQLite, and on PostgreSQL too when
`GATEWAY_TEST_DATABASE_URL` is set.

Each PostgreSQL run gets a schema of its own with a random name (the store keeps its tables in the
URL's `?schema=`), dropped afterwards, so runs never see each other's rows even when several test
sessions share the database.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sessions.db import normalize_url
from sessions.store import Store, default_url

PG_URL = os.environ.get("GATEWAY_TEST_DATABASE_URL")

needs_postgres = pytest.mark.skipif(not PG_URL, reason="GATEWAY_TEST_DATABASE_URL is not set")

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=[pytest.mark.postgres, needs_postgres]),
]


def url_with_schema(base: str, schema: str) -> str:
    return make_url(base).update_query_dict({"schema": schema}).render_as_string(hide_password=False)


async def drop_schema(base: str, schema: str) -> None:
    url, _ = normalize_url(base)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def postgres_schema() -> AsyncIterator[str]:
    """The URL of a PostgreSQL schema of the caller's own (`GATEWAY_TEST_DATABASE_URL`), dropped
    when the block ends."""
    assert PG_URL is not None
    schema = f"gw_test_{uuid.uuid4().hex[:20]}"
    try:
        yield url_with_schema(PG_URL, schema)
    finally:
        await drop_schema(PG_URL, schema)


@pytest.fixture(params=BACKENDS)
async def store_url(request: pytest.FixtureRequest, gateway_home: Path) -> AsyncIterator[str]:
    """A database URL for a fresh, empty store on each backend."""
    if request.param == "sqlite":
        yield default_url(gateway_home)
        return
    async with postgres_schema() as url:
        yield url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    async with Store.open(store_url) as opened:
        yield opened
