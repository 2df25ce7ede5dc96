"""sessions: persistence and serialisation of agent sessions.

The store (schema, session tree, transcripts, durable event log, runs, input ledger), per-session
lanes and the global run limiter, live sessions and the `SessionManager` that runs agents on
them, compaction, and recovery after a crash. Import what is named here; the rest is private.
"""

from sessions.compaction import CompactionError, CompactionResult
from sessions.errors import (
    Conflict,
    InvalidRequest,
    InvalidTransition,
    KeyConflict,
    LaneFull,
    NotFound,
    SeqConflict,
    SessionsError,
    StateDirLocked,
    StoreClosed,
    StoreError,
    StoreUnavailable,
    Unavailable,
)
from sessions.journal import Journal, JournalItem
from sessions.lane import LaneRegistry, RunLimiter, SessionLane
from sessions.manager import SessionManager, SubmitResult, agent_from_key, kind_from_key
from sessions.profiles import QUEUE_MODES, AgentDirectory, AgentProfile, RunContext, RunSettings, ToolsFactory
from sessions.records import EntryRecord, EventRecord, InputRecord, RunRecord, SessionRecord, TreeNode
from sessions.session_events import EventPublisher, NullPublisher, SessionEvent
from sessions.store import NewEntry, NewEvent, Store, default_url

__all__ = [
    "QUEUE_MODES",
    "AgentDirectory",
    "AgentProfile",
    "CompactionError",
    "CompactionResult",
    "Conflict",
    "EntryRecord",
    "EventPublisher",
    "EventRecord",
    "InputRecord",
    "InvalidRequest",
    "InvalidTransition",
    "Journal",
    "JournalItem",
    "KeyConflict",
    "LaneFull",
    "LaneRegistry",
    "NewEntry",
    "NewEvent",
    "NotFound",
    "NullPublisher",
    "RunContext",
    "RunLimiter",
    "RunRecord",
    "RunSettings",
    "SeqConflict",
    "SessionEvent",
    "SessionLane",
    "SessionManager",
    "SessionRecord",
    "SessionsError",
    "StateDirLocked",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreUnavailable",
    "SubmitResult",
    "ToolsFactory",
    "TreeNode",
    "Unavailable",
    "agent_from_key",
    "default_url",
    "kind_from_key",
]
