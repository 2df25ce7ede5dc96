"""What `find` and `ls` share: the directory check and the listing result with its notices."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_core.agent_types import AgentToolResult
from agent_core.errors import ToolError
from agent_core.messages import TextContent
from agent_core.tools.truncate import format_size, truncate_head


def require_directory(path: Path, display: str, not_a_directory: str) -> None:
    """Raise `ToolError` unless `path` is an existing directory (`display` names it)."""
    if not path.exists():
        raise ToolError(f"Path not found: {display}")
    if not path.is_dir():
        raise ToolError(f"{display} {not_a_directory}")


def listing_result(
    lines: Sequence[str],
    *,
    details: dict[str, Any],
    limit_notice: str | None,
    truncation_hint: str,
    max_bytes: int,
) -> AgentToolResult:
    """One line per entry, cut at `max_bytes`; the notices (limit first) follow a blank line.

    `details` gains ``truncation`` when the output is cut.
    """
    cut = truncate_head("\n".join(lines), max_lines=len(lines) + 1, max_bytes=max_bytes)
    notices = [limit_notice] if limit_notice is not None else []
    if cut.truncated:
        notices.append(f"[{format_size(max_bytes)} output limit reached. {truncation_hint}]")
        details["truncation"] = cut.details()
    text = cut.content + ("\n\n" + "\n".join(notices) if notices else "")
    return AgentToolResult(content=[TextContent(text=text)], details=details)
