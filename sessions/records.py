"""What the store returns and takes: frozen records of stored rows and the shapes of new rows.

Records are snapshots: they never change after the store returns them and never reach back into
the database. JSON values (payloads, origins, results) are plain dicts and lists; treat them as
read-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import msgspec

from sessions.schema import EntryKind, InputStatus, RunStatus, SessionKind, SessionStatus

__all__ = [
    "ContextEntry",
    "EntryRecord",
    "EventRecord",
    "InputRecord",
    "JSONObject",
    "NewEntry",
    "NewEvent",
    "RunRecord",
    "SessionRecord",
    "TreeNode",
]

JSONObject = dict[str, Any]


class SessionRecord(msgspec.Struct, frozen=True):
    """One session. `entry_count` is the number of its own entries (not inherited ones);
    `pruned_seq` the highest event seq removed by pruning (0 when none); `keys` the session keys
    that currently point at it."""

    id: str
    agent_id: str
    parent_id: str | None
    root_id: str
    branch_point: str | None
    kind: SessionKind
    label: str | None
    status: SessionStatus
    model: str | None
    thinking_level: str | None
    queue_mode: str | None
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost: float
    entry_count: int
    last_seq: int
    pruned_seq: int
    origin: JSONObject | None
    created_at: int
    updated_at: int
    keys: tuple[str, ...] = ()
    owner_node: str | None = None
    """The cluster node whose lane holds the session (`sessions.ownership`); None on one node."""


class EntryRecord(msgspec.Struct, frozen=True):
    """One transcript entry. For a message `payload` is the message as pi writes it; for a
    compaction `{summary, firstKeptEntryId, tokensBefore}`."""

    id: str
    session_id: str
    position: int
    kind: EntryKind
    payload: JSONObject
    created_at: int


class ContextEntry(NamedTuple):
    """A transcript entry as a model context is built from it (`Store.transcript.context_entries`): its id,
    kind (an `EntryKind` value), and payload still as the stored JSON text, so that a message is
    validated straight from the text without the intermediate dicts of `EntryRecord.payload`.
    A named tuple rather than a record class: every run makes one per entry of its context."""

    id: str
    kind: str
    payload: str


class EventRecord(msgspec.Struct, frozen=True):
    session_id: str
    seq: int
    run_id: str | None
    type: str
    payload: JSONObject
    created_at: int


class RunRecord(msgspec.Struct, frozen=True):
    id: str
    session_id: str
    status: RunStatus
    termination_reason: str | None
    started_at: int
    ended_at: int | None
    error: str | None
    result: Any


class InputRecord(msgspec.Struct, frozen=True):
    """One accepted inbound message of the input ledger. `seq` orders inputs by arrival."""

    idempotency_key: str
    seq: str
    session_id: str
    run_id: str | None
    source: JSONObject | None
    payload: JSONObject
    queue_mode: str | None
    status: InputStatus
    reason: str | None
    created_at: int
    updated_at: int


class TreeNode(msgspec.Struct, frozen=True):
    """A session and its children, ordered by creation."""

    session: SessionRecord
    children: tuple[TreeNode, ...] = ()

    def walk(self) -> Iterator[TreeNode]:
        """This node, then every descendant, depth first in child order."""
        stack: list[TreeNode] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def find(self, session_id: str) -> TreeNode | None:
        """The node of `session_id` in this subtree, or None."""
        return next((node for node in self.walk() if node.session.id == session_id), None)


class NewEntry(msgspec.Struct, frozen=True):
    """An entry to append; `id` is generated (UUIDv7) when not given."""

    kind: EntryKind | str
    payload: JSONObject
    id: str | None = None


class NewEvent(msgspec.Struct, frozen=True):
    """An event to append; `seq` must continue the session's log (last seq + 1, + 2, ...)."""

    seq: int
    type: str
    payload: JSONObject
    run_id: str | None = None
