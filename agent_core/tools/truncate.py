"""Truncation of tool output shared by the built-in tools.

A model's context is finite, so every tool caps what it returns by lines and by UTF-8 bytes,
whichever limit is hit first. File-like output (read, grep, find, ls) keeps the head; command
output (bash) keeps the tail, where errors and results usually are. Only whole lines are kept,
except when a single line alone is over the byte limit: then part of that line is kept and
`partial_line` says so. The caller adds a notice telling the model what was cut and how to see
more; `Truncation.details()` is the machine-readable form for a result's `details`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_BYTES = 50 * 1024
MAX_LINE_CHARS = 500
"""Longest line grep shows; longer matches are cut (minified files would flood the output)."""


class Truncation(msgspec.Struct, frozen=True, kw_only=True, dict=True):
    """What survived a truncation and what the original looked like."""

    content: str
    truncated: bool
    truncated_by: Literal["lines", "bytes"] | None
    total_lines: int
    total_bytes: int
    output_lines: int
    output_bytes: int
    max_lines: int
    max_bytes: int
    partial_line: bool = False

    def details(self) -> dict[str, Any]:
        """camelCase form for a tool result's `details`."""
        return {
            "truncated": self.truncated,
            "truncatedBy": self.truncated_by,
            "totalLines": self.total_lines,
            "totalBytes": self.total_bytes,
            "outputLines": self.output_lines,
            "outputBytes": self.output_bytes,
            "maxLines": self.max_lines,
            "maxBytes": self.max_bytes,
            "partialLine": self.partial_line,
        }


def format_size(size: int) -> str:
    """Human-readable byte count: ``512B``, ``50.0KB``, ``3.2MB``."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f}KB"
    return f"{size / (1024 * 1024):.1f}MB"


def split_lines(text: str) -> list[str]:
    """Lines of `text`; a final newline ends the last line rather than starting an empty one."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def truncate_head(
    text: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Keep the first lines of `text` that fit both limits."""
    return _truncate(text, max_lines=max_lines, max_bytes=max_bytes, from_end=False)


def truncate_tail(
    text: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Keep the last lines of `text` that fit both limits."""
    return _truncate(text, max_lines=max_lines, max_bytes=max_bytes, from_end=True)


def truncate_line(line: str, max_chars: int = MAX_LINE_CHARS) -> tuple[str, bool]:
    """Cut one line to `max_chars` characters; returns the line and whether it was cut."""
    if len(line) <= max_chars:
        return line, False
    return line[:max_chars] + "... [line truncated]", True


def cut_bytes_head(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose UTF-8 form fits in `max_bytes` (never half a character)."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def cut_bytes_tail(text: str, max_bytes: int) -> str:
    """The longest suffix of `text` whose UTF-8 form fits in `max_bytes` (never half a character)."""
    if max_bytes <= 0:
        return ""
    return text.encode("utf-8")[-max_bytes:].decode("utf-8", errors="ignore")


def _truncate(text: str, *, max_lines: int, max_bytes: int, from_end: bool) -> Truncation:
    lines = split_lines(text)
    total_bytes = len(text.encode("utf-8"))
    total_lines = len(lines)
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return Truncation(
            content=text,
            truncated=False,
            truncated_by=None,
            total_lines=total_lines,
            total_bytes=total_bytes,
            output_lines=total_lines,
            output_bytes=total_bytes,
            max_lines=max_lines,
            max_bytes=max_bytes,
        )
    ordered = reversed(lines) if from_end else iter(lines)
    kept: list[str] = []
    used = 0
    truncated_by: Literal["lines", "bytes"] = "lines"
    partial = False
    for line in ordered:
        if len(kept) >= max_lines:
            truncated_by = "lines"
            break
        size = len(line.encode("utf-8")) + (1 if kept else 0)
        if used + size > max_bytes:
            truncated_by = "bytes"
            if not kept:
                cut = cut_bytes_tail(line, max_bytes) if from_end else cut_bytes_head(line, max_bytes)
                kept.append(cut)
                used = len(cut.encode("utf-8"))
                partial = True
            break
        kept.append(line)
        used += size
    if from_end:
        kept.reverse()
    content = "\n".join(kept)
    return Truncation(
        content=content,
        truncated=True,
        truncated_by=truncated_by,
        total_lines=total_lines,
        total_bytes=total_bytes,
        output_lines=len(kept),
        output_bytes=len(content.encode("utf-8")),
        max_lines=max_lines,
        max_bytes=max_bytes,
        partial_line=partial,
    )
