"""The values the schema's text columns may hold (`sessions.schema` turns each into a check
constraint of its column): session kinds and statuses, entry kinds, run and input statuses, the
states of a channel's outbox and of an extension's trust."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ChannelOutboxState",
    "EntryKind",
    "ExtensionTrustState",
    "InputStatus",
    "RunStatus",
    "SessionKind",
    "SessionStatus",
]


class SessionKind(StrEnum):
    MAIN = "main"
    DIRECT = "direct"
    GROUP = "group"
    CHANNEL = "channel"
    BRANCH = "branch"
    SUBAGENT = "subagent"
    CUSTOM = "custom"


class SessionStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    ARCHIVED = "archived"


class EntryKind(StrEnum):
    MESSAGE = "message"
    COMPACTION = "compaction"
    CUSTOM = "custom"
    MODEL_CHANGE = "model_change"
    LABEL = "label"


class RunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    ABORTED = "aborted"
    INTERRUPTED = "interrupted"


class ChannelOutboxState(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    EDITED = "edited"
    FINAL = "final"
    FAILED = "failed"


class InputStatus(StrEnum):
    QUEUED = "queued"
    STEERED = "steered"
    FOLLOWUP = "followup"
    RUNNING = "running"
    DONE = "done"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"


class ExtensionTrustState(StrEnum):
    """Whether an operator lets a discovered Python extension run (`gateway.extensions.trust`)."""

    PENDING = "pending"
    ENABLED = "enabled"
    DISABLED = "disabled"
