"""Cluster: the nodes that share one database, who owns each session, and named leases.

A session's lane lives on one node at a time: `sessions.owner_node` names it and
`sessions.owner_token` is the fencing token, raised by one each time another node takes the
session, and checked by every write of the owner. `cluster_nodes` holds each node's heartbeat:
ownership (of sessions and of `leases`, which name channel accounts) is valid while the owner's
row has not expired.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_nodes",
        sa.Column("node_id", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("info", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("node_id", name="pk_cluster_nodes"),
        sa.CheckConstraint("state IN ('running', 'draining')", name="ck_cluster_nodes_state"),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("holder", sa.String(200), nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("owner_node", sa.String(200), nullable=True))
        batch.add_column(sa.Column("owner_token", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_index("ix_sessions_owner_node", "sessions", ["owner_node"])
    # A node whose bus subscription was lost reads back the events stored since then.
    op.create_index("ix_events_created_at", "events", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_events_created_at", table_name="events")
    op.drop_index("ix_sessions_owner_node", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("owner_token")
        batch.drop_column("owner_node")
    op.drop_table("leases")
    op.drop_table("cluster_nodes")
