from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection, Engine

from migrations import runner
from sessions.errors import StoreError
from sessions.schema import metadata
from sessions.store import NewEntry, Store

TABLES = {
    "sessions",
    "cluster_nodes",
    "leases",
    "session_keys",
    "entries",
    "events",
    "runs",
    "inputs",
    "channel_dedupe",
    "channel_outbox",
    "channel_pairing_requests",
    "channel_pairing_approvals",
    "channel_cursors",
    "gateway_tokens",
    "extension_trust",
    "extension_trust_changes",
    "cron_jobs",
    "cron_runs",
    "webhook_deliveries",
    "tool_approvals",
}


@contextmanager
def all_statements() -> Iterator[list[str]]:
    """Every SQL statement any engine sends while the block runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()).upper())

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def schema_snapshot(conn: Connection) -> dict[str, Any]:
    found = inspect(conn)
    snapshot: dict[str, Any] = {}
    for table in sorted(found.get_table_names()):
        snapshot[table] = {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(table)],
            "indexes": sorted((i["name"] or "", tuple(i["column_names"])) for i in found.get_indexes(table)),
            "pk": found.get_pk_constraint(table)["constrained_columns"],
            "fks": sorted(
                str(fk["referred_table"]) + str(fk["constrained_columns"])
                for fk in found.get_foreign_keys(table)
            ),
        }
    return snapshot


async def test_fresh_database_is_upgraded_to_head(store: Store) -> None:
    async with store.database.read() as conn:
        revision = await conn.run_sync(runner.current_revision)
        tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    assert revision == runner.head_revision() == "0008"
    assert tables == TABLES | {"alembic_version"}


async def test_schema_equals_what_the_migrations_create(store: Store) -> None:
    def differences(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))

    async with store.database.read() as conn:
        assert await conn.run_sync(differences) == []


async def test_reopening_a_current_database_changes_nothing(store_url: str) -> None:
    async with Store.open(store_url) as store:
        session = await store.tree.create_session(agent_id="main", key="agent:main:main")
        await store.transcript.append(session.id, [NewEntry("message", {"role": "user", "content": "kept"})])
        async with store.database.read() as conn:
            before = await conn.run_sync(schema_snapshot)
    with all_statements() as seen:
        store = await Store.open(store_url)
    try:
        changes = [s for s in seen if s.startswith(("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE"))]
        assert changes == []
        async with store.database.read() as conn:
            assert await conn.run_sync(schema_snapshot) == before
            assert await conn.run_sync(runner.current_revision) == runner.head_revision()
        again = await store.tree.get_session_by_key("agent:main:main")
        assert again is not None
        assert [e.payload["content"] for e in await store.transcript.read(again.id)] == ["kept"]
    finally:
        await store.aclose()


async def test_migrations_downgrade_and_upgrade_again(store: Store) -> None:
    def down_and_up(conn: Connection) -> tuple[set[str], set[str]]:
        command.downgrade(runner.config(conn), "base")
        after_down = set(inspect(conn).get_table_names())
        runner.upgrade(conn)
        return after_down, set(inspect(conn).get_table_names())

    async with store.database.write() as conn:
        after_down, after_up = await conn.run_sync(down_and_up)
    assert after_down & TABLES == set()
    assert after_up >= TABLES


async def test_a_pairing_request_waiting_before_0003_survives_the_upgrade(store: Store) -> None:
    def down_insert_up(conn: Connection) -> list[Any]:
        command.downgrade(runner.config(conn), "0002")
        conn.execute(
            text(
                "INSERT INTO channel_pairing_requests (code, platform, account_id, sender_id, sender_name,"
                " created_at) VALUES ('ABCD2345', 'discord', 'default', '77', 'mallory', 1)"
            )
        )
        runner.upgrade(conn)
        return list(conn.execute(text("SELECT code, sender_id, reply_route FROM channel_pairing_requests")))

    async with store.database.write() as conn:
        rows = await conn.run_sync(down_insert_up)
    assert [tuple(row) for row in rows] == [("ABCD2345", "77", None)]


async def test_a_newer_schema_is_refused(store_url: str) -> None:
    async with Store.open(store_url) as store, store.database.write() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match="newer gateway"):
        await Store.open(store_url)


async def test_unsupported_url_is_refused() -> None:
    with pytest.raises(StoreError, match="unsupported"):
        await Store.open("mysql://localhost/x")


def test_migrations_run_from_any_working_directory(tmp_path: Path) -> None:
    """The scripts are found next to the installed package, not through the working directory."""
    assert Path(runner.config().get_main_option("script_location") or "") == Path(runner.__file__).parent
    url = f"sqlite:///{tmp_path / 'db' / 'gateway.db'}"
    program = textwrap.dedent(
        f"""
        import asyncio
        from sessions.store import Store

        async def main():
            async with Store.open({url!r}) as store:
                session = await store.tree.create_session(agent_id="main")
                print(session.kind)

        asyncio.run(main())
        """
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=work, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "main"
