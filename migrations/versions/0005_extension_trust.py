"""Python extensions' trust states and the audit trail of their changes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "extension_trust",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("discovered_at", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.Column("changed_by", sa.Text(), nullable=False),
        sa.CheckConstraint("state IN ('pending', 'enabled', 'disabled')", name="ck_extension_trust_state"),
        sa.PrimaryKeyConstraint("name", name="pk_extension_trust"),
    )
    op.create_table(
        "extension_trust_changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_extension_trust_changes"),
    )
    op.create_index("ix_extension_trust_changes_name", "extension_trust_changes", ["name"])


def downgrade() -> None:
    op.drop_index("ix_extension_trust_changes_name", table_name="extension_trust_changes")
    op.drop_table("extension_trust_changes")
    op.drop_table("extension_trust")
