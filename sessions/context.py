"""Building an agent's context from a session's transcript.

The transcript of a session is its ancestors' entries up to each branch point, then its own (the
store resolves that). Only `message` and `compaction` entries shape the model's view: with a
compaction on the path, the context is the summary, then the messages from the compaction's
first kept entry on. Other entry kinds (labels, model changes, custom data) never reach the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_core import (
    AgentMessage,
    CustomMessage,
    Message,
    TextContent,
    UserMessage,
    parse_message,
)

COMPACTION_ROLE = "compactionSummary"
SUMMARY_PREFIX = (
    "The conversation so far was compacted. This summary stands for the earlier messages:\n\n<summary>\n"
)
SUMMARY_SUFFIX = "\n</summary>"


class EntryLike:
    """What the builder needs of a transcript entry (the store's EntryRecord satisfies it)."""

    id: str
    kind: str
    payload: Any


def build_context(entries: Sequence[Any]) -> list[AgentMessage]:
    """The messages an agent starts a run from, given the session's resolved transcript."""
    compaction_index = None
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].kind == "compaction":
            compaction_index = index
            break
    if compaction_index is None:
        return [_message(e) for e in entries if e.kind == "message"]

    compaction = entries[compaction_index]
    payload = _payload(compaction)
    first_kept = payload.get("firstKeptEntryId")
    messages: list[AgentMessage] = [
        CustomMessage(
            role=COMPACTION_ROLE,
            summary=payload.get("summary", ""),
            tokensBefore=payload.get("tokensBefore", 0),
            timestamp=payload.get("timestamp", 0) or 0,
        )
    ]
    keeping = first_kept is None
    for index, entry in enumerate(entries):
        if index == compaction_index:
            keeping = True
            continue
        if not keeping and entry.id == first_kept:
            keeping = True
        if keeping and entry.kind == "message":
            messages.append(_message(entry))
    return messages


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
        import json

        payload = json.loads(payload)
    return payload if isinstance(payload, dict) else {}


def _message(entry: Any) -> AgentMessage:
    return parse_message(_payload(entry))
