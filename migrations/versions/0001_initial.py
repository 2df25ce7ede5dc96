"""The initial schema: sessions, session keys, entries, events, runs and the input ledger.

Revision ID: 0001
Revises:
Create Date: 2025-11-26

Written out in full rather than derived from `sessions.schema`, so that this revision keeps
meaning the same thing after the schema module moves on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_SESSION_KINDS = "'main', 'direct', 'group', 'channel', 'branch', 'subagent', 'custom'"
_SESSION_STATUSES = "'idle', 'running', 'interrupted', 'archived'"
_ENTRY_KINDS = "'message', 'compaction', 'custom', 'model_change', 'label'"
_RUN_STATUSES = "'running', 'done', 'error', 'aborted', 'interrupted'"
_INPUT_STATUSES = "'queued', 'steered', 'followup', 'running', 'done', 'rejected', 'interrupted'"


def _id(name: str, *, nullable: bool) -> sa.Column[str]:
    return sa.Column(name, sa.String(36), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "sessions",
        _id("id", nullable=False),
        sa.Column("agent_id", sa.String(200), nullable=False),
        _id("parent_id", nullable=True),
        _id("root_id", nullable=False),
        _id("branch_point", nullable=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("thinking_level", sa.String(20), nullable=True),
        sa.Column("queue_mode", sa.String(20), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost", sa.Double(), nullable=False),
        sa.Column("last_position", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("pruned_seq", sa.BigInteger(), nullable=False),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
        sa.ForeignKeyConstraint(["parent_id"], ["sessions.id"], name="fk_sessions_parent_id_sessions"),
        sa.CheckConstraint(f"kind IN ({_SESSION_KINDS})", name="ck_sessions_kind"),
        sa.CheckConstraint(f"status IN ({_SESSION_STATUSES})", name="ck_sessions_status"),
    )
    for column in ("parent_id", "root_id", "agent_id", "updated_at"):
        op.create_index(f"ix_sessions_{column}", "sessions", [column])

    op.create_table(
        "session_keys",
        sa.Column("key", sa.String(500), nullable=False),
        _id("session_id", nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_session_keys"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name="fk_session_keys_session_id_sessions"),
    )
    op.create_index("ix_session_keys_session_id", "session_keys", ["session_id"])

    op.create_table(
        "entries",
        _id("id", nullable=False),
        _id("session_id", nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_entries"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name="fk_entries_session_id_sessions"),
        sa.UniqueConstraint("session_id", "position", name="uq_entries_session_id_position"),
        sa.CheckConstraint(f"kind IN ({_ENTRY_KINDS})", name="ck_entries_kind"),
    )

    op.create_table(
        "events",
        _id("session_id", nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(100), nullable=True),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_events"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name="fk_events_session_id_sessions"),
    )

    op.create_table(
        "runs",
        sa.Column("id", sa.String(100), nullable=False),
        _id("session_id", nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("termination_reason", sa.String(50), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name="fk_runs_session_id_sessions"),
        sa.CheckConstraint(f"status IN ({_RUN_STATUSES})", name="ck_runs_status"),
    )
    op.create_index("ix_runs_session_id", "runs", ["session_id"])
    op.create_index("ix_runs_status", "runs", ["status"])

    op.create_table(
        "inputs",
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        _id("seq", nullable=False),
        _id("session_id", nullable=False),
        sa.Column("run_id", sa.String(100), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("queue_mode", sa.String(20), nullable=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("idempotency_key", name="pk_inputs"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name="fk_inputs_session_id_sessions"),
        sa.UniqueConstraint("seq", name="uq_inputs_seq"),
        sa.CheckConstraint(f"status IN ({_INPUT_STATUSES})", name="ck_inputs_status"),
    )
    op.create_index("ix_inputs_session_id_status", "inputs", ["session_id", "status"])
    op.create_index("ix_inputs_status", "inputs", ["status"])


def downgrade() -> None:
    for table in ("inputs", "runs", "events", "entries", "session_keys", "sessions"):
        op.drop_table(table)
