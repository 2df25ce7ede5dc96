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
from sessions.event_payloads import (
    AgentFinished,
    AgentStarted,
    ErrorReported,
    EventPayload,
    MessageCompleted,
    MessageDelta,
    MessageStarted,
    StatusChanged,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFinished,
    TurnStarted,
    UnknownPayload,
    read_payload,
)
from sessions.input_ledger import FINAL_INPUT_STATUSES, WAITING_INPUT_STATUSES, InputClaim
from sessions.inputs import SubmitResult
from sessions.journal import Journal, JournalItem
from sessions.keys import agent_from_key, kind_from_key
from sessions.lane import LaneRegistry, RunLimiter, SessionLane
from sessions.manager import SessionManager
from sessions.profiles import (
    QUEUE_MODES,
    AgentDirectory,
    AgentProfile,
    RunContext,
    RunSettings,
    RunTools,
    ToolsFactory,
)
from sessions.records import EntryRecord, EventRecord, InputRecord, RunRecord, SessionRecord, TreeNode
from sessions.session_events import EventPublisher, NullPublisher, SessionEvent, read_event
from sessions.store import NewEntry, NewEvent, Store, default_url, open_database
from sessions.termination import Outcome, TerminationReason

__all__ = [
    "FINAL_INPUT_STATUSES",
    "WAITING_INPUT_STATUSES",
    "QUEUE_MODES",
    "AgentDirectory",
    "AgentFinished",
    "AgentProfile",
    "AgentStarted",
    "CompactionError",
    "CompactionResult",
    "Conflict",
    "EntryRecord",
    "ErrorReported",
    "EventPayload",
    "EventPublisher",
    "EventRecord",
    "InputClaim",
    "InputRecord",
    "InvalidRequest",
    "InvalidTransition",
    "Journal",
    "JournalItem",
    "KeyConflict",
    "LaneFull",
    "LaneRegistry",
    "MessageCompleted",
    "MessageDelta",
    "MessageStarted",
    "NewEntry",
    "NewEvent",
    "NotFound",
    "NullPublisher",
    "Outcome",
    "RunContext",
    "RunLimiter",
    "RunRecord",
    "RunSettings",
    "RunTools",
    "SeqConflict",
    "SessionEvent",
    "SessionLane",
    "SessionManager",
    "SessionRecord",
    "SessionsError",
    "StateDirLocked",
    "StatusChanged",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreUnavailable",
    "TerminationReason",
    "SubmitResult",
    "ToolFinished",
    "ToolStarted",
    "ToolUpdated",
    "ToolsFactory",
    "TreeNode",
    "TurnFinished",
    "TurnStarted",
    "UnknownPayload",
    "Unavailable",
    "agent_from_key",
    "default_url",
    "kind_from_key",
    "open_database",
    "read_event",
    "read_payload",
]
