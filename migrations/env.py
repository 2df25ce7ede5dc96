"""Alembic's entry point for running the scripts in `versions/`.

The store passes an open connection (already inside its transaction) through
`config.attributes["connection"]`; the migrations then run in that transaction and the store
commits. Given only `sqlalchemy.url` (a developer running Alembic by hand), this opens an async
engine for the URL itself.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from sessions.schema import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite can roll back DDL too, so every backend upgrades all-or-nothing.
        transactional_ddl=True,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_url(url: str) -> None:
    # Imported here: the store's path (a connection given) never loads the asyncio package.
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("migrations need a connection or a sqlalchemy.url")
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=metadata, literal_binds=True, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    asyncio.run(_run_with_url(url))


_main()
