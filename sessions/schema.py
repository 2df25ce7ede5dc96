"""The database schema as SQLAlchemy Core tables (the values its text columns may hold are in
`sessions.schema_values`, exported here too).

This module describes the schema at the newest migration; it never creates anything. Tables are
created and changed only by the Alembic migrations in `migrations/versions`, and a test checks
that what the migrations build equals `metadata` here. Change both together.

JSON columns are text holding compact JSON (object keys camelCase, as pi writes them).
Timestamps are integer Unix milliseconds.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from sessions.schema_values import (
    ChannelOutboxState,
    EntryKind,
    ExtensionTrustState,
    InputStatus,
    RunStatus,
    SessionKind,
    SessionStatus,
)

__all__ = [
    "ChannelOutboxState",
    "EntryKind",
    "ExtensionTrustState",
    "InputStatus",
    "RunStatus",
    "SessionKind",
    "SessionStatus",
    "channel_cursors",
    "channel_dedupe",
    "channel_outbox",
    "channel_pairing_approvals",
    "channel_pairing_requests",
    "cron_jobs",
    "cron_runs",
    "entries",
    "events",
    "extension_trust",
    "extension_trust_changes",
    "gateway_tokens",
    "inputs",
    "metadata",
    "runs",
    "session_keys",
    "sessions",
    "tool_approvals",
    "webhook_deliveries",
]


def _one_of(column: str, values: type[StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(v.value) for v in values)})"


# Explicit names make constraints addressable by later migrations on every backend.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(36)

# One row per session. `root_id` (the id of the tree's root; a root's own id) never changes, so a
# whole tree is one indexed query. `branch_point` names an entry of the parent's transcript and is
# not a foreign key: the store validates it, and entries are only ever deleted with their session,
# which cannot go while it has children. `last_position` is the position of the session's last own
# entry (entries are append-only, so it is also their count); `last_seq` the seq of its last event;
# `pruned_seq` the highest seq removed by pruning (0 when none), so readers can tell whether a
# replay from a given seq is exact.
sessions = Table(
    "sessions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("agent_id", String(200), nullable=False),
    Column("parent_id", ID, ForeignKey("sessions.id"), nullable=True),
    Column("root_id", ID, nullable=False),
    Column("branch_point", ID, nullable=True),
    Column("kind", String(20), nullable=False),
    Column("label", Text, nullable=True),
    Column("status", String(20), nullable=False),
    Column("model", String(200), nullable=True),
    Column("thinking_level", String(20), nullable=True),
    Column("queue_mode", String(20), nullable=True),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("cost", Double, nullable=False),
    Column("last_position", Integer, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("pruned_seq", BigInteger, nullable=False),
    Column("origin", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("owner_node", String(200), nullable=True),
    Column("owner_token", BigInteger, nullable=False, server_default="0"),
    CheckConstraint(_one_of("kind", SessionKind), name="kind"),
    CheckConstraint(_one_of("status", SessionStatus), name="status"),
    Index(None, "parent_id"),
    Index(None, "root_id"),
    Index(None, "agent_id"),
    Index(None, "updated_at"),
    Index(None, "owner_node"),
)

# A key names a conversation and points at its current session; reset and switch move it.
session_keys = Table(
    "session_keys",
    metadata,
    Column("key", String(500), primary_key=True),
    Column("session_id", ID, ForeignKey("sessions.id"), nullable=False),
    Index(None, "session_id"),
)

# A session's own transcript, 1-based `position` without gaps; rows are never updated.
entries = Table(
    "entries",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, ForeignKey("sessions.id"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("kind", String(20), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    UniqueConstraint("session_id", "position"),
    CheckConstraint(_one_of("kind", EntryKind), name="kind"),
)

# The durable event log: seqs per session start at 1 and increase by one (pruning leaves holes).
events = Table(
    "events",
    metadata,
    Column("session_id", ID, ForeignKey("sessions.id"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("run_id", String(100), nullable=True),
    Column("type", String(100), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("session_id", "seq"),
    Index(None, "created_at"),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(100), primary_key=True),
    Column("session_id", ID, ForeignKey("sessions.id"), nullable=False),
    Column("status", String(20), nullable=False),
    Column("termination_reason", String(50), nullable=True),
    Column("started_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    Column("result", Text, nullable=True),
    CheckConstraint(_one_of("status", RunStatus), name="status"),
    Index(None, "session_id"),
    Index(None, "status"),
)

# The input ledger. `seq` (a UUIDv7, increasing in arrival order within a process) orders inputs
# that share a millisecond, so queued inputs resume in the order they were accepted.
inputs = Table(
    "inputs",
    metadata,
    Column("idempotency_key", String(200), primary_key=True),
    Column("seq", ID, nullable=False, unique=True),
    Column("session_id", ID, ForeignKey("sessions.id"), nullable=False),
    Column("run_id", String(100), nullable=True),
    Column("source", Text, nullable=True),
    Column("payload", Text, nullable=False),
    Column("queue_mode", String(20), nullable=True),
    Column("status", String(20), nullable=False),
    Column("reason", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    CheckConstraint(_one_of("status", InputStatus), name="status"),
    Index(None, "session_id", "status"),
    Index(None, "status"),
)


# --- chat bindings (written by `gateway.channel_store`) -------------------------------------------

# Inbound event ids a binding has handled. A row is live until `expires_at` (at least 20 minutes
# after it was written, longer than any platform redelivers); expired rows are swept.
channel_dedupe = Table(
    "channel_dedupe",
    metadata,
    Column("platform", String(20), nullable=False),
    Column("account_id", String(100), nullable=False),
    Column("event_id", String(300), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("platform", "account_id", "event_id"),
    Index(None, "expires_at"),
)

# One reply chunk on its way to a platform, keyed by its idempotency key (`bindings.outbox_key`).
# `route` is the JSON of a `ReplyRoute`. Rows in `final` or `failed` are kept for a while (a
# duplicate key must never post again) and then swept.
channel_outbox = Table(
    "channel_outbox",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("platform", String(20), nullable=False),
    Column("account_id", String(100), nullable=False),
    Column("route", Text, nullable=False),
    Column("run_id", String(200), nullable=False),
    Column("chunk_index", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("state", String(20), nullable=False),
    Column("platform_message_id", String(100), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    CheckConstraint(_one_of("state", ChannelOutboxState), name="state"),
    Index(None, "platform", "account_id", "state"),
    Index(None, "updated_at"),
)

# A DM sender waiting for an operator's approval. A request lives one hour unless approved
# (`approved_at`); unapproved expired ones are swept. `reply_route` (the JSON of a `ReplyRoute`,
# null for requests made before it was kept) is where the approval is announced.
channel_pairing_requests = Table(
    "channel_pairing_requests",
    metadata,
    Column("code", String(16), primary_key=True),
    Column("platform", String(20), nullable=False),
    Column("account_id", String(100), nullable=False),
    Column("sender_id", String(100), nullable=False),
    Column("sender_name", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("approved_at", BigInteger, nullable=True),
    Column("reply_route", Text, nullable=True),
    Index(None, "platform", "account_id", "sender_id"),
)

# Senders an operator approved; kept until removed by hand.
channel_pairing_approvals = Table(
    "channel_pairing_approvals",
    metadata,
    Column("platform", String(20), nullable=False),
    Column("account_id", String(100), nullable=False),
    Column("sender_id", String(100), nullable=False),
    Column("code", String(16), nullable=False),
    Column("approved_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("platform", "account_id", "sender_id"),
)

# The newest message id seen per channel, for catch-up after downtime.
channel_cursors = Table(
    "channel_cursors",
    metadata,
    Column("platform", String(20), nullable=False),
    Column("account_id", String(100), nullable=False),
    Column("channel_id", String(100), nullable=False),
    Column("message_id", String(100), nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("platform", "account_id", "channel_id"),
)


# --- gateway credentials (written by `gateway.tokens`) --------------------------------------------

# A named, scoped token. Only the SHA-256 of the secret is kept (hex, unique: a connect finds its
# token by it); `scopes` is a comma-separated list of operator scopes. A row lives until revoked.
gateway_tokens = Table(
    "gateway_tokens",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("secret_sha256", String(64), nullable=False, unique=True),
    Column("scopes", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)


# --- Python extensions' trust (written by `gateway.extensions.trust`) -----------------------------

# One row per extension ever discovered, kept when it disappears (so re-installing it does not
# re-enable code nobody approved under that origin). `origin` is where it was found (entry point
# or file); a different origin under the same name sends it back to pending.
extension_trust = Table(
    "extension_trust",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("origin", Text, nullable=False),
    Column("discovered_at", BigInteger, nullable=False),
    Column("changed_at", BigInteger, nullable=False),
    Column("changed_by", Text, nullable=False),
    CheckConstraint(_one_of("state", ExtensionTrustState), name="state"),
)

# Every change of a trust state, with who made it: append-only, the audit trail. `from_state` is
# null for the first discovery.
extension_trust_changes = Table(
    "extension_trust_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    Column("from_state", String(16), nullable=True),
    Column("to_state", String(16), nullable=False),
    Column("origin", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("at", BigInteger, nullable=False),
    Index(None, "name"),
)


# --- scheduled and triggered runs (written by `gateway.automation.store`) ------------------------

# A cron job, kept until removed. `schedule`, `payload` and `delivery` are the JSON of their wire
# objects; `origin_at` is when the job last became live (created, enabled or rescheduled): only
# slots after it are due.
cron_jobs = Table(
    "cron_jobs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", Text, nullable=False),
    Column("display_name", Text, nullable=True),
    Column("description", Text, nullable=True),
    Column("agent_id", String(200), nullable=False),
    Column("session_key", String(500), nullable=True),
    Column("session_target", String(520), nullable=False),
    Column("wake_mode", String(20), nullable=False),
    Column("schedule", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("delivery", Text, nullable=True),
    Column("catch_up", String(10), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("delete_after_run", Boolean, nullable=False),
    Column("origin_at", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    CheckConstraint("catch_up IN ('none', 'latest', 'all')", name="catch_up"),
)

# One run of a job, written in the transaction that records its input (`id` is the input's
# idempotency key), so a slot and its input commit together or not at all. `slot` is the instant
# the run was scheduled for (null for runs started by hand); (job_id, slot) is unique, which is
# what makes a slot fire once however many schedulers race for it. `delivery` is the JSON of the
# binding and route the reply was sent to, `delivery_error` why it could not be. Outcomes are
# read from the input ledger and the run it ended in; the newest rows per job are kept, and the
# rows of a removed job go with it.
cron_runs = Table(
    "cron_runs",
    metadata,
    Column("id", String(100), primary_key=True),
    Column("job_id", ID, nullable=False),
    Column("slot", BigInteger, nullable=True),
    Column("trigger", String(20), nullable=False),
    Column("session_key", String(500), nullable=False),
    Column("delivery", Text, nullable=True),
    Column("delivery_error", Text, nullable=True),
    Column("fired_at", BigInteger, nullable=False),
    UniqueConstraint("job_id", "slot"),
    Index(None, "job_id", "fired_at"),
)

# Webhook deliveries seen, by delivery id (`id:<header>`) and by signature (`sig:<hex>`), each
# with the run it started. Written with that run's input; kept until `expires_at` (a week for
# ids, twice the replay window for signatures), then swept.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("hook", String(64), nullable=False),
    Column("key", String(200), nullable=False),
    Column("run_id", String(100), nullable=False),
    Column("received_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("hook", "key"),
    Index(None, "expires_at"),
)


# --- approvals of tool calls (written by `gateway.approvals.store`) ------------------------------

# One request for a person's decision before a tool call runs, kept as the audit trail. `status`
# is pending until decided (allowed, denied), left without a decision (expired) or ended with its
# run (cancelled: aborted, or the gateway restarted while it waited). `request` is the JSON of
# what the person is shown (tool, arguments, risk, the rule that asked); `decided_by`, `surface`
# and `decided_at` say who ended it, from where and when; `note` is the reason given or written.
tool_approvals = Table(
    "tool_approvals",
    metadata,
    Column("id", ID, primary_key=True),
    Column("session_id", ID, nullable=False),
    Column("session_key", String(500), nullable=True),
    Column("agent_id", String(200), nullable=False),
    Column("run_id", String(100), nullable=False),
    Column("tool_call_id", String(200), nullable=False),
    Column("tool_name", String(200), nullable=False),
    Column("request", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("decision", String(20), nullable=True),
    Column("reason", String(40), nullable=True),
    Column("note", Text, nullable=True),
    Column("decided_by", Text, nullable=True),
    Column("surface", String(64), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("decided_at", BigInteger, nullable=True),
    CheckConstraint("status IN ('pending', 'allowed', 'denied', 'expired', 'cancelled')", name="status"),
    Index(None, "status", "created_at"),
    Index(None, "session_id"),
)


# --- cluster (written by `sessions.ownership` and `gateway.cluster`) -------------------------------

# The nodes sharing the database. A node renews `expires_at` (database clock, Unix ms) with each
# heartbeat; what it owns (sessions through `sessions.owner_node`, and `leases`) is its own only
# while its row has not expired. `info` is JSON the node reports (host, pid, runs, live sessions).
cluster_nodes = Table(
    "cluster_nodes",
    metadata,
    Column("node_id", String(200), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("heartbeat_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("info", Text, nullable=True),
    CheckConstraint("state IN ('running', 'draining')", name="state"),
)

# A named lease (a channel account: `channel:<platform>:<account>`), held by a node while that
# node is alive; `token` is its fencing token, raised by one at each change of holder.
leases = Table(
    "leases",
    metadata,
    Column("name", String(300), primary_key=True),
    Column("holder", String(200), nullable=True),
    Column("token", BigInteger, nullable=False),
    Column("acquired_at", BigInteger, nullable=True),
)
