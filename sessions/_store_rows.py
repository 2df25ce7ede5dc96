"""Turning stored rows into records and values into stored text (private to the store)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import Row

from sessions._json import dumps
from sessions.errors import InvalidRequest
from sessions.records import EntryRecord, EventRecord, InputRecord, RunRecord, SessionRecord
from sessions.schema import EntryKind, InputStatus, RunStatus, SessionKind, SessionStatus

__all__ = [
    "AnyRow",
    "dumps",
    "entry_record",
    "event_record",
    "input_record",
    "loads",
    "parse",
    "run_record",
    "session_record",
]

E = TypeVar("E", bound=StrEnum)

AnyRow = Row[*tuple[Any, ...]]
"""A result row of any width."""


def parse(kind: type[E], value: E | str, what: str) -> E:
    """`value` as a member of `kind`; raise InvalidRequest naming the accepted values."""
    try:
        return kind(value)
    except ValueError:
        accepted = ", ".join(member.value for member in kind)
        raise InvalidRequest(f"{what} must be one of {accepted}; got {value!r}") from None


def loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def session_record(values: Mapping[Any, Any], keys: Iterable[str] = ()) -> SessionRecord:
    """A session from its row (or the values just inserted)."""
    return SessionRecord(
        id=values["id"],
        agent_id=values["agent_id"],
        parent_id=values["parent_id"],
        root_id=values["root_id"],
        branch_point=values["branch_point"],
        kind=SessionKind(values["kind"]),
        label=values["label"],
        status=SessionStatus(values["status"]),
        model=values["model"],
        thinking_level=values["thinking_level"],
        queue_mode=values["queue_mode"],
        input_tokens=values["input_tokens"],
        output_tokens=values["output_tokens"],
        total_tokens=values["total_tokens"],
        cost=values["cost"],
        entry_count=values["last_position"],
        last_seq=values["last_seq"],
        pruned_seq=values["pruned_seq"],
        origin=loads(values["origin"]),
        created_at=values["created_at"],
        updated_at=values["updated_at"],
        keys=tuple(sorted(keys)),
        owner_node=values.get("owner_node"),
    )


def entry_record(row: AnyRow) -> EntryRecord:
    m = row._mapping
    return EntryRecord(
        id=m["id"],
        session_id=m["session_id"],
        position=m["position"],
        kind=EntryKind(m["kind"]),
        payload=json.loads(m["payload"]),
        created_at=m["created_at"],
    )


def event_record(row: AnyRow) -> EventRecord:
    m = row._mapping
    return EventRecord(
        session_id=m["session_id"],
        seq=m["seq"],
        run_id=m["run_id"],
        type=m["type"],
        payload=json.loads(m["payload"]),
        created_at=m["created_at"],
    )


def run_record(row: AnyRow) -> RunRecord:
    m = row._mapping
    return RunRecord(
        id=m["id"],
        session_id=m["session_id"],
        status=RunStatus(m["status"]),
        termination_reason=m["termination_reason"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        error=m["error"],
        result=loads(m["result"]),
    )


def input_record(row: AnyRow | Mapping[str, Any]) -> InputRecord:
    """An input from its row, or from its columns by name."""
    m = row if isinstance(row, Mapping) else row._mapping
    return InputRecord(
        idempotency_key=m["idempotency_key"],
        seq=m["seq"],
        session_id=m["session_id"],
        run_id=m["run_id"],
        source=loads(m["source"]),
        payload=json.loads(m["payload"]),
        queue_mode=m["queue_mode"],
        status=InputStatus(m["status"]),
        reason=m["reason"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )
