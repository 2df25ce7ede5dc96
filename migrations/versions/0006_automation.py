"""Scheduled and triggered runs: cron jobs, their runs (one per slot), webhook deliveries seen.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cron_jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("display_name", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("agent_id", sa.String(200), nullable=False),
        sa.Column("session_key", sa.String(500), nullable=True),
        sa.Column("session_target", sa.String(520), nullable=False),
        sa.Column("wake_mode", sa.String(20), nullable=False),
        sa.Column("schedule", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("delivery", sa.Text(), nullable=True),
        sa.Column("catch_up", sa.String(10), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("delete_after_run", sa.Boolean(), nullable=False),
        sa.Column("origin_at", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_cron_jobs"),
        sa.CheckConstraint("catch_up IN ('none', 'latest', 'all')", name="ck_cron_jobs_catch_up"),
    )
    op.create_table(
        "cron_runs",
        sa.Column("id", sa.String(100), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=True),
        sa.Column("trigger", sa.String(20), nullable=False),
        sa.Column("session_key", sa.String(500), nullable=False),
        sa.Column("delivery", sa.Text(), nullable=True),
        sa.Column("delivery_error", sa.Text(), nullable=True),
        sa.Column("fired_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_cron_runs"),
        sa.UniqueConstraint("job_id", "slot", name="uq_cron_runs_job_id_slot"),
    )
    op.create_index("ix_cron_runs_job_id_fired_at", "cron_runs", ["job_id", "fired_at"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("hook", sa.String(64), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=False),
        sa.Column("received_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hook", "key", name="pk_webhook_deliveries"),
    )
    op.create_index("ix_webhook_deliveries_expires_at", "webhook_deliveries", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_expires_at", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_cron_runs_job_id_fired_at", table_name="cron_runs")
    op.drop_table("cron_runs")
    op.drop_table("cron_jobs")
