"""The `write` tool: create or overwrite a file, creating parent directories."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.messages import TextContent
from agent_core.tools.common import as_mapping, check_not_aborted, get_str, resolve_tool_path

WRITE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path to the file to write (relative or absolute)"},
        "content": {"type": "string", "description": "Content to write to the file"},
    },
    "required": ["path", "content"],
}


def write_file(path: Path, display: str, data: bytes) -> None:
    """Write `data` to `path`, creating parents; raises `ToolError` with a clear reason."""
    if path.is_dir():
        raise ToolError(f"{display} is a directory; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"Cannot write {display}: a parent of it is a file, not a directory") from None
    except PermissionError:
        raise ToolError(f"Permission denied writing {display}") from None
    except OSError as exc:
        raise ToolError(f"Cannot write {display}: {exc.strerror or exc}") from None


def create_write_tool(workspace: Path) -> AgentTool:
    """`write {path, content}`: replace the file's content (UTF-8), creating it and its parents."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(params)
        display = get_str(args, "path")
        content = get_str(args, "content")
        check_not_aborted(signal, "Write")
        data = content.encode("utf-8")
        await asyncio.to_thread(write_file, resolve_tool_path(workspace, display), display, data)
        return AgentToolResult(
            content=[TextContent(text=f"Successfully wrote {len(data)} bytes to {display}")],
            details={"bytes": len(data)},
        )

    return AgentTool(
        name="write",
        label="write",
        description=(
            "Write content to a file. Creates the file if it does not exist and overwrites it if "
            "it does; parent directories are created as needed."
        ),
        parameters=WRITE_PARAMETERS,
        execute=execute,
    )
