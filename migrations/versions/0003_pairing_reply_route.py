"""Pairing requests remember where the sender wrote from, so an approval can be announced there.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channel_pairing_requests") as batch:
        batch.add_column(sa.Column("reply_route", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channel_pairing_requests") as batch:
        batch.drop_column("reply_route")
