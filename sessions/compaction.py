"""Compaction: replace the older part of a long transcript by a structured summary.

The algorithm follows pi's coding agent: estimate tokens (characters / 4), walk back from the
newest message until `keep_recent_tokens` are kept, move the cut to a valid point (a user or
assistant message, never a tool result, so a tool call is never separated from its result),
summarise everything before the cut (with the previous summary, when there is one) with the
session's own model, and write a `compaction` entry `{summary, firstKeptEntryId, tokensBefore}`.
Later contexts start from the summary followed by the kept entries (see `sessions.context`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from agent_core import (
    AbortSignal,
    AgentMessage,
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    StreamFn,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    UserMessage,
    maybe_await,
    text_of,
)
from sessions.context import COMPACTION_ROLE, build_context, view_of

__all__ = [
    "SUMMARY_SYSTEM_PROMPT",
    "CompactionError",
    "CompactionPlan",
    "CompactionResult",
    "CutPoint",
    "context_tokens",
    "estimate_tokens",
    "find_cut_point",
    "plan",
    "serialize_for_summary",
    "should_compact",
    "summarize",
]

SUMMARY_SYSTEM_PROMPT = (
    "You write hand-over notes for a coding and research assistant whose conversation is too long "
    "to keep. Read the conversation and write a summary another assistant can continue from. Use "
    "exactly these sections in Markdown: ## Goal, ## Constraints and preferences, ## Progress "
    "(Done / In progress / Blocked), ## Key decisions, ## Files and commands, ## Next steps, "
    "## Critical context. Keep names, paths, numbers and error texts verbatim. Be concise."
)

IMAGE_TOKENS = 1_200


class CompactionError(Exception):
    """Compaction could not run (nothing to compact, or the summary call failed)."""


class CutPoint(msgspec.Struct, frozen=True, dict=True):
    first_kept_index: int
    tokens_before: int
    """Estimated tokens of the messages before the cut."""


class CompactionPlan(msgspec.Struct, frozen=True, dict=True):
    """What one compaction does: summarise `to_summarize` (continuing `previous_summary`) and keep
    the history from `first_kept_entry_id` on. `tokens_before` estimates the context before."""

    to_summarize: list[AgentMessage]
    first_kept_entry_id: str
    tokens_before: int
    previous_summary: str | None


class CompactionResult(msgspec.Struct, frozen=True, dict=True):
    summary: str
    first_kept_entry_id: str
    tokens_before: int

    def payload(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "firstKeptEntryId": self.first_kept_entry_id,
            "tokensBefore": self.tokens_before,
        }


def estimate_tokens(message: AgentMessage) -> int:
    """A cheap, provider-independent estimate: characters / 4, images at a flat rate."""
    chars = 0
    images = 0
    if message.role == COMPACTION_ROLE:
        chars = len(str(getattr(message, "summary", "")))
    content = getattr(message, "content", None)
    if isinstance(content, str):
        chars += len(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, TextContent):
                chars += len(block.text)
            elif isinstance(block, ThinkingContent):
                chars += len(block.thinking)
            elif isinstance(block, ToolCall):
                chars += len(block.name) + len(json.dumps(block.arguments))
            elif isinstance(block, ImageContent):
                images += 1
    return (chars + 3) // 4 + images * IMAGE_TOKENS


def context_tokens(messages: Sequence[AgentMessage]) -> int:
    """Tokens of a context: the last assistant's reported usage when there is one (plus an
    estimate for what came after it), otherwise the estimate of everything."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage) and message.usage.total_tokens > 0:
            after = sum(estimate_tokens(m) for m in messages[index + 1 :])
            return message.usage.total_tokens + after
    return sum(estimate_tokens(m) for m in messages)


def should_compact(tokens: int, context_window: int, reserve_tokens: int) -> bool:
    return context_window > 0 and tokens > context_window - reserve_tokens


def find_cut_point(messages: Sequence[AgentMessage], keep_recent_tokens: int) -> CutPoint | None:
    """Where the kept part starts: the newest messages worth at least `keep_recent_tokens`,
    extended back to a user or assistant message. None when that leaves nothing to summarise."""
    kept = 0
    cut = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        kept += estimate_tokens(messages[index])
        cut = index
        if kept >= keep_recent_tokens:
            break
    # A tool result stays with the assistant message that called it.
    while cut > 0 and messages[cut].role not in ("user", "assistant"):
        cut -= 1
    if cut <= 0:
        return None
    return CutPoint(first_kept_index=cut, tokens_before=sum(estimate_tokens(m) for m in messages[:cut]))


def plan(entries: Sequence[Any], keep_recent_tokens: int) -> CompactionPlan:
    """The compaction of a resolved transcript. Raise CompactionError when there is not enough
    history to compact."""
    view = view_of(entries)
    messages = [message for _, message in view.messages]
    cut = find_cut_point(messages, keep_recent_tokens)
    if cut is None:
        raise CompactionError("there is not enough history to compact")
    previous = view.compaction.get("summary") if view.compaction is not None else None
    return CompactionPlan(
        to_summarize=messages[: cut.first_kept_index],
        first_kept_entry_id=view.messages[cut.first_kept_index][0],
        tokens_before=context_tokens(build_context(entries)),
        previous_summary=previous if isinstance(previous, str) else None,
    )


def serialize_for_summary(messages: Sequence[AgentMessage], previous_summary: str | None) -> str:
    lines: list[str] = []
    if previous_summary:
        lines.append("Earlier summary (update it with what follows):\n" + previous_summary + "\n")
    lines.append("Conversation:")
    for message in messages:
        role = message.role
        if role == COMPACTION_ROLE:
            continue
        if isinstance(message, AssistantMessage):
            parts = []
            for block in message.content:
                if isinstance(block, TextContent) and block.text:
                    parts.append(block.text)
                elif isinstance(block, ToolCall):
                    parts.append(f"[calls {block.name} {json.dumps(block.arguments)[:2000]}]")
            lines.append("assistant: " + " ".join(parts))
        elif role == "toolResult":
            lines.append(f"tool result: {text_of(message)[:4000]}")
        else:
            lines.append(f"{role}: {text_of(message)}")
    return "\n".join(lines)


async def summarize(
    messages: Sequence[AgentMessage],
    *,
    model: Model,
    stream_fn: StreamFn,
    api_key: str | None,
    previous_summary: str | None = None,
    signal: AbortSignal | None = None,
) -> str:
    """Ask the session's model for the structured summary. Raise CompactionError on failure."""
    prompt = serialize_for_summary(messages, previous_summary)
    context = Context(
        system_prompt=SUMMARY_SYSTEM_PROMPT,
        messages=[UserMessage(content=[TextContent(text=prompt)])],
    )
    options = StreamOptions(api_key=api_key, signal=signal, max_tokens=min(model.max_tokens, 8_192))
    try:
        stream = await maybe_await(stream_fn(model, context, options))
        final = await stream.result()
    except Exception as exc:
        raise CompactionError(f"the summary call failed: {exc}") from exc
    if final.stop_reason in ("error", "aborted"):
        raise CompactionError(f"the summary call failed: {final.error_message or final.stop_reason}")
    text = text_of(final).strip()
    if not text:
        raise CompactionError("the model returned an empty summary")
    return text
