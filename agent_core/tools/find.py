"""The `find` tool: list files and directories whose names or paths match a glob."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.messages import TextContent
from agent_core.tools._listing import listing_result, require_directory
from agent_core.tools.common import (
    as_mapping,
    check_not_aborted,
    get_opt_int,
    get_opt_str,
    get_str,
    resolve_tool_path,
)
from agent_core.tools.truncate import DEFAULT_MAX_BYTES, format_size
from agent_core.tools.walk import compile_glob, walk_tree

DEFAULT_FIND_LIMIT = 1000

FIND_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {
            "type": "string",
            "description": "Glob pattern to match files, e.g. '*.ts', '**/*.json', or 'src/**/*.spec.ts'",
        },
        "path": {"type": "string", "description": "Directory to search in (default: current directory)"},
        "limit": {
            "type": "number",
            "description": f"Maximum number of results (default: {DEFAULT_FIND_LIMIT})",
        },
    },
    "required": ["pattern"],
}


def _find(
    root: Path, *, display: str, pattern: str, limit: int, signal: AbortSignal | None, max_bytes: int
) -> AgentToolResult:
    require_directory(root, display, "is not a directory; give a directory to search in")
    matches = compile_glob(pattern)
    found: list[str] = []
    limit_reached = False
    for entry in walk_tree(root, signal):
        if not matches(entry.relative):
            continue
        if len(found) >= limit:
            limit_reached = True
            break
        found.append(entry.relative + "/" if entry.kind == "dir" else entry.relative)
    if not found:
        return AgentToolResult(
            content=[TextContent(text=f"No files found matching {pattern!r}")], details={"count": 0}
        )
    details: dict[str, Any] = {"count": len(found)}
    limit_notice = None
    if limit_reached:
        limit_notice = (
            f"[{limit} results limit reached. Use limit={limit * 2} for more, or refine the pattern]"
        )
        details["resultLimitReached"] = limit
    return listing_result(
        found,
        details=details,
        limit_notice=limit_notice,
        truncation_hint="Refine the pattern or path",
        max_bytes=max_bytes,
    )


def create_find_tool(workspace: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> AgentTool:
    """`find {pattern, path?, limit?}`: matching paths relative to the searched directory."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(params)
        pattern = get_str(args, "pattern")
        display = get_opt_str(args, "path") or "."
        limit = get_opt_int(args, "limit", minimum=1) or DEFAULT_FIND_LIMIT
        check_not_aborted(signal, "Search")
        root = resolve_tool_path(workspace, display)
        return await asyncio.to_thread(
            _find, root, display=display, pattern=pattern, limit=limit, signal=signal, max_bytes=max_bytes
        )

    return AgentTool(
        name="find",
        label="find",
        description=(
            "Search for files and directories by glob pattern. A pattern without '/' matches names; "
            "with '/' it matches paths relative to the search directory ('**' spans directories). "
            f"Returns up to {DEFAULT_FIND_LIMIT} results (change with limit), directories ending "
            f"in '/'; output is truncated at {format_size(max_bytes)}. Skips .git directories."
        ),
        parameters=FIND_PARAMETERS,
        execute=execute,
    )
