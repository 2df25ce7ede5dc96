"""The head revision the store checks without loading Alembic, and what it does with it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine

from migrations import runner
from migrations.head import HEAD_REVISION
from sessions.store import Store

_OPEN_IN_A_FRESH_PROCESS = textwrap.dedent(
    """
    import asyncio, json, sys
    from sessions.store import Store

    async def main():
        async with Store.open(sys.argv[1]) as store:
            async with store.database.read() as conn:
                rows = await conn.exec_driver_sql("SELECT version_num FROM alembic_version")
                revisions = [row[0] for row in rows]
        print(json.dumps({"revisions": revisions, "alembic": "alembic" in sys.modules}))

    asyncio.run(main())
    """
)


def _open_fresh(url: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_IN_A_FRESH_PROCESS, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_head_revision_names_the_newest_script() -> None:
    assert runner.head_revision() == HEAD_REVISION


async def test_a_current_database_opens_without_the_migration_tooling(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await (await Store.open(url)).aclose()
    assert _open_fresh(url) == {"revisions": [HEAD_REVISION], "alembic": False}


async def test_a_database_behind_the_head_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    await (await Store.open(url)).aclose()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            command.downgrade(runner.config(conn), "-1")
    finally:
        engine.dispose()
    assert _open_fresh(url) == {"revisions": [HEAD_REVISION], "alembic": True}
