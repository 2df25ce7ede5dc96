"""Building an agent's context from a session's transcript.

The transcript of a session is its ancestors' entries up to each branch point, then its own (the
store resolves that). Only `message` and `compaction` entries shape the model's view: with a
compaction on the path, the context is the newest compaction's summary, then the messages from
its first kept entry on. Other entry kinds (labels, model changes, custom data) never reach the
model.

Entries may carry their payload as a dict (`EntryRecord`) or as the stored JSON text
(`ContextEntry`, what `Store.transcript.context_entries` reads for each run); text is validated into a
message directly, without building the intermediate dicts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from agent_core import (
    AgentMessage,
    CustomMessage,
    Message,
    TextContent,
    UserMessage,
    parse_message,
    parse_message_json,
)

__all__ = [
    "COMPACTION_ROLE",
    "SUMMARY_PREFIX",
    "SUMMARY_SUFFIX",
    "View",
    "build_context",
    "convert_to_llm",
    "summary_message",
    "view_of",
]

COMPACTION_ROLE = "compactionSummary"
SUMMARY_PREFIX = (
    "The conversation so far was compacted. This summary stands for the earlier messages:\n\n<summary>\n"
)
SUMMARY_SUFFIX = "\n</summary>"


class View(msgspec.Struct, frozen=True, dict=True):
    """What the model sees of a transcript: the newest compaction's payload (None without one)
    and the message entries after it, as (entry id, message)."""

    compaction: dict[str, Any] | None
    messages: list[tuple[str, AgentMessage]]


def view_of(entries: Sequence[Any]) -> View:
    """The model's view of a resolved transcript (entries with `id`, `kind`, `payload`)."""
    compaction_index = None
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].kind == "compaction":
            compaction_index = index
            break
    if compaction_index is None:
        return View(None, [(e.id, _message(e)) for e in entries if e.kind == "message"])
    payload = _payload(entries[compaction_index])
    first_kept = payload.get("firstKeptEntryId")
    kept: list[tuple[str, AgentMessage]] = []
    # Kept: from the first kept entry (before the compaction entry) on, or else everything after
    # the compaction entry.
    keeping = False
    for index, entry in enumerate(entries):
        if index == compaction_index:
            keeping = True
            continue
        if not keeping and entry.id == first_kept:
            keeping = True
        if keeping and entry.kind == "message":
            kept.append((entry.id, _message(entry)))
    return View(payload, kept)


def build_context(entries: Sequence[Any]) -> list[AgentMessage]:
    """The messages an agent starts a run from, given the session's resolved transcript: the
    compaction summary (as a `compactionSummary` message) when there is one, then the kept
    messages."""
    view = view_of(entries)
    messages: list[AgentMessage] = []
    if view.compaction is not None:
        messages.append(summary_message(view.compaction))
    messages.extend(message for _, message in view.messages)
    return messages


def summary_message(compaction: dict[str, Any]) -> AgentMessage:
    """The `compactionSummary` message a context starts with, from a compaction's payload."""
    return CustomMessage(
        role=COMPACTION_ROLE,
        summary=compaction.get("summary", ""),
        tokensBefore=compaction.get("tokensBefore", 0),
        timestamp=compaction.get("timestamp", 0) or 0,
    )


def convert_to_llm(messages: list[AgentMessage]) -> list[Message]:
    """The model's view: the three LLM roles, plus compaction summaries as user messages."""
    out: list[Message] = []
    for message in messages:
        role = message.role
        if role in ("user", "assistant", "toolResult"):
            out.append(message)  # type: ignore[arg-type]
        elif role == COMPACTION_ROLE:
            summary = str(getattr(message, "summary", "") or "")
            out.append(
                UserMessage(
                    content=[TextContent(text=SUMMARY_PREFIX + summary + SUMMARY_SUFFIX)],
                    timestamp=message.timestamp,
                )
            )
    return out


def _payload(entry: Any) -> dict[str, Any]:
    payload = entry.payload
    if isinstance(payload, str):
        payload = json.loads(payload)
    return payload if isinstance(payload, dict) else {}


def _message(entry: Any) -> AgentMessage:
    payload = entry.payload
    if isinstance(payload, str):
        return parse_message_json(payload)
    return parse_message(payload)
