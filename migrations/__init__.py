"""Alembic environment and versions: the only way the database schema is created or changed.

The store upgrades a database to `head` when it opens (`migrations.runner.upgrade`), inside its
own transaction, unless the database already records `head.HEAD_REVISION`. Nothing here needs
an `alembic.ini`: the configuration is built in code and the scripts are found next to
`runner.py`, which also works from an installed package.

To add a revision, write `versions/NNNN_<what>.py` with `revision = "NNNN"` and `down_revision`
naming the previous one, then update `sessions/schema.py` to match and `head.py` to name it; tests
compare them.
"""
