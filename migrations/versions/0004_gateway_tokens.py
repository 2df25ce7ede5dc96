"""Named, scoped gateway tokens, stored as the SHA-256 of their secret.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_tokens",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_gateway_tokens"),
        sa.UniqueConstraint("secret_sha256", name="uq_gateway_tokens_secret_sha256"),
    )


def downgrade() -> None:
    op.drop_table("gateway_tokens")
