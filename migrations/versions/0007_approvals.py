"""Approvals of tool calls: a person's decision before a risky call runs, and its audit trail.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_approvals",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("session_key", sa.String(500), nullable=True),
        sa.Column("agent_id", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(200), nullable=False),
        sa.Column("request", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("decision", sa.String(20), nullable=True),
        sa.Column("reason", sa.String(40), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("decided_by", sa.Text(), nullable=True),
        sa.Column("surface", sa.String(64), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tool_approvals"),
        sa.CheckConstraint(
            "status IN ('pending', 'allowed', 'denied', 'expired', 'cancelled')",
            name="ck_tool_approvals_status",
        ),
    )
    op.create_index("ix_tool_approvals_status_created_at", "tool_approvals", ["status", "created_at"])
    op.create_index("ix_tool_approvals_session_id", "tool_approvals", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_tool_approvals_session_id", table_name="tool_approvals")
    op.drop_index("ix_tool_approvals_status_created_at", table_name="tool_approvals")
    op.drop_table("tool_approvals")
