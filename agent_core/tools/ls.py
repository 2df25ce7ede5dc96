"""The `ls` tool: list one directory's entries, directories marked with a trailing ``/``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.messages import TextContent
from agent_core.tools._listing import listing_result, require_directory
from agent_core.tools.common import (
    as_mapping,
    check_not_aborted,
    get_opt_int,
    get_opt_str,
    resolve_tool_path,
)
from agent_core.tools.truncate import DEFAULT_MAX_BYTES, format_size

DEFAULT_LS_LIMIT = 500

LS_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Directory to list (default: current directory)"},
        "limit": {
            "type": "number",
            "description": f"Maximum number of entries to return (default: {DEFAULT_LS_LIMIT})",
        },
    },
}


def _ls(path: Path, display: str, limit: int, max_bytes: int) -> AgentToolResult:
    require_directory(path, display, "is not a directory; use read to see a file")
    try:
        with os.scandir(path) as scan:
            entries = sorted(scan, key=lambda entry: (entry.name.lower(), entry.name))
    except PermissionError:
        raise ToolError(f"Permission denied listing {display}") from None
    if not entries:
        return AgentToolResult(content=[TextContent(text="(empty directory)")], details={"count": 0})
    names: list[str] = []
    for entry in entries[:limit]:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        names.append(entry.name + "/" if is_dir else entry.name)
    details: dict[str, Any] = {"count": len(names), "total": len(entries)}
    limit_notice = None
    if len(entries) > limit:
        limit_notice = (
            f"[{limit} entries limit reached ({len(entries)} in total). Use limit={limit * 2} for more]"
        )
        details["entryLimitReached"] = limit
    return listing_result(
        names,
        details=details,
        limit_notice=limit_notice,
        truncation_hint="Use find to narrow the listing",
        max_bytes=max_bytes,
    )


def create_ls_tool(workspace: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> AgentTool:
    """`ls {path?, limit?}`: entries in name order, including dotfiles."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(params)
        display = get_opt_str(args, "path") or "."
        limit = get_opt_int(args, "limit", minimum=1) or DEFAULT_LS_LIMIT
        check_not_aborted(signal, "List")
        return await asyncio.to_thread(_ls, resolve_tool_path(workspace, display), display, limit, max_bytes)

    return AgentTool(
        name="ls",
        label="ls",
        description=(
            "List directory contents in alphabetical order, including dotfiles; directories end "
            f"with '/'. Returns up to {DEFAULT_LS_LIMIT} entries (change with limit); output is "
            f"truncated at {format_size(max_bytes)}."
        ),
        parameters=LS_PARAMETERS,
        execute=execute,
    )
