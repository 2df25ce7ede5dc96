"""SQLAlchemy's asyncio engine without its ORM (`sessions._async_engine`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

_STORE_THEN_ORM = textwrap.dedent(
    """
    import asyncio, json, sys
    from sessions.store import Store

    async def main():
        async with Store.open(sys.argv[1]) as store:
            session = await store.tree.create_session(agent_id="main", key="agent:main:main")
            again = await store.tree.get_session_by_key("agent:main:main")
        return session.id == again.id

    same = asyncio.run(main())
    from sqlalchemy.ext.asyncio import AsyncConnection  # as a store module of another package may

    orm_with_store = "sqlalchemy.orm" in sys.modules

    import sqlalchemy.ext.asyncio as package
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
    from sqlalchemy.ext.asyncio.engine import AsyncEngine

    try:
        package.no_such_name
        missing = "found"
    except AttributeError:
        missing = "AttributeError"
    print(json.dumps({
        "same": same,
        "orm_with_store": orm_with_store,
        "orm_on_demand": "sqlalchemy.orm" in sys.modules,
        "session": AsyncSession.__name__ + " " + async_sessionmaker.__name__,
        "engine": package.AsyncEngine is AsyncEngine,
        "missing": missing,
    }))
    """
)

_PACKAGE_FIRST = textwrap.dedent(
    """
    import asyncio, sys
    import sqlalchemy.ext.asyncio
    from sqlalchemy import text
    from sessions._async_engine import create_async_engine

    async def main():
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        async with engine.begin() as conn:
            print((await conn.execute(text("SELECT 41 + 1"))).scalar())
        await engine.dispose()

    asyncio.run(main())
    """
)


def _run(program: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_store_runs_without_the_orm_which_still_loads_on_demand(tmp_path: Path) -> None:
    result = json.loads(_run(_STORE_THEN_ORM, f"sqlite:///{tmp_path / 'gateway.db'}"))
    assert result == {
        "same": True,
        "orm_with_store": False,
        "orm_on_demand": True,
        "session": "AsyncSession async_sessionmaker",
        "engine": True,
        "missing": "AttributeError",
    }


def test_a_process_that_imported_the_package_first_keeps_it() -> None:
    assert _run(_PACKAGE_FIRST).strip() == "42"
