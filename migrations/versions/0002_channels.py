"""Chat bindings: inbound dedupe with expiry, the reply outbox, pairing requests and approvals,
channel cursors.

Revision ID: 0002
Revises: 0001
Create Date: 2025-12-01

Written out in full rather than derived from `sessions.schema`, so that this revision keeps
meaning the same thing after the schema module moves on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_OUTBOX_STATES = "'pending', 'sent', 'edited', 'final', 'failed'"


def _platform() -> list[sa.Column[str]]:
    return [
        sa.Column("platform", sa.String(20), nullable=False),
        sa.Column("account_id", sa.String(100), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "channel_dedupe",
        *_platform(),
        sa.Column("event_id", sa.String(300), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("platform", "account_id", "event_id", name="pk_channel_dedupe"),
    )
    op.create_index("ix_channel_dedupe_expires_at", "channel_dedupe", ["expires_at"])

    op.create_table(
        "channel_outbox",
        sa.Column("key", sa.String(64), nullable=False),
        *_platform(),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("chunk_index", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("platform_message_id", sa.String(100), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_channel_outbox"),
        sa.CheckConstraint(f"state IN ({_OUTBOX_STATES})", name="ck_channel_outbox_state"),
    )
    op.create_index(
        "ix_channel_outbox_platform_account_id_state", "channel_outbox", ["platform", "account_id", "state"]
    )
    op.create_index("ix_channel_outbox_updated_at", "channel_outbox", ["updated_at"])

    op.create_table(
        "channel_pairing_requests",
        sa.Column("code", sa.String(16), nullable=False),
        *_platform(),
        sa.Column("sender_id", sa.String(100), nullable=False),
        sa.Column("sender_name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("approved_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("code", name="pk_channel_pairing_requests"),
    )
    op.create_index(
        "ix_channel_pairing_requests_platform_account_id_sender_id",
        "channel_pairing_requests",
        ["platform", "account_id", "sender_id"],
    )

    op.create_table(
        "channel_pairing_approvals",
        *_platform(),
        sa.Column("sender_id", sa.String(100), nullable=False),
        sa.Column("code", sa.String(16), nullable=False),
        sa.Column("approved_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("platform", "account_id", "sender_id", name="pk_channel_pairing_approvals"),
    )

    op.create_table(
        "channel_cursors",
        *_platform(),
        sa.Column("channel_id", sa.String(100), nullable=False),
        sa.Column("message_id", sa.String(100), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("platform", "account_id", "channel_id", name="pk_channel_cursors"),
    )


def downgrade() -> None:
    for table in (
        "channel_cursors",
        "channel_pairing_approvals",
        "channel_pairing_requests",
        "channel_outbox",
        "channel_dedupe",
    ):
        op.drop_table(table)
