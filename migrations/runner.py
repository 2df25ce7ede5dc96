"""Running the migrations from code: no `alembic.ini`, scripts found next to this file.

A module of its own (rather than the package's `__init__`) so that it imports the same way whether
`migrations` is installed as a regular package or found as a namespace package.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

__all__ = ["config", "current_revision", "head_revision", "upgrade"]

_HERE = Path(__file__).resolve().parent


def config(connection: Connection | None = None, *, url: str | None = None) -> Config:
    """An Alembic configuration for these scripts, bound to `connection` (or to `url`)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE).replace("%", "%%"))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision of the scripts."""
    head = ScriptDirectory.from_config(config()).get_current_head()
    if head is None:
        raise RuntimeError("no migration scripts found")
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; None for a database never migrated."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Upgrade the database behind `connection` to `revision` inside its open transaction.

    Raise alembic's CommandError when the database is at a revision these scripts do not know
    (for example one written by a newer gateway).
    """
    from alembic import command

    command.upgrade(config(connection), revision)
