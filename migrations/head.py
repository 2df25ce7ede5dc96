"""The newest revision of the scripts in `versions/`, known without loading Alembic.

The store compares it with the revision a database records and loads the migration tooling only
when they differ (a new database, or one written by an older or newer gateway). A test checks it
against the scripts, so a new revision that forgets to update it fails there.
"""

from __future__ import annotations

__all__ = ["HEAD_REVISION"]

HEAD_REVISION = "0008"
