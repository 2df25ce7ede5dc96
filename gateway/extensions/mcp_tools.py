"""An MCP server's tools as the agent's tools: `<server>__<tool>` with the server's input schema.

The agent loop validates a call's arguments against that schema with the same coercions as the
built-in tools (`agent_core.validation`) before the call reaches the server. A call goes to the
supervised server, not to one connection, so a tool stays usable across restarts (and answers a
clear error while its server is down). Progress notifications become tool updates. An aborted
run ends its calls at once (the server is not told; it finishes or times out on its own). Every
call is audited (`mcp.tool_call`: server, tool, outcome, duration).

Tool names: models accept 1-64 characters of letters, digits, `_` and `-`. A server's tool name
with other characters has them replaced by `_`; the full name is cut to 64 characters. A tool
whose name then collides with another of the same server is left out (logged).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from mcp import types

from agent_core import AbortSignal, AgentTool, AgentToolResult, TextContent, ToolUpdateCallback
from gateway.extensions.errors import McpToolError
from gateway.extensions.mcp_results import to_tool_result
from gateway.extensions.mcp_server import McpServer

log = structlog.get_logger("gateway.extensions.mcp")

SEPARATOR = "__"
MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

Audit = Callable[[dict[str, Any]], None]
T = TypeVar("T")


def model_tool_name(server: str, tool: str) -> str:
    """The name the model sees for `tool` of `server`."""
    return f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"[:MAX_NAME]


def server_tools(server: McpServer, tools: tuple[types.Tool, ...], *, audit: Audit) -> list[AgentTool]:
    """The agent's tools for `tools` of `server` (its current or last known list)."""
    out: dict[str, AgentTool] = {}
    for tool in tools:
        name = model_tool_name(server.name, tool.name)
        if name in out:
            log.warning(
                "MCP tool left out: its name collides", server=server.name, tool=tool.name, as_name=name
            )
            continue
        out[name] = _agent_tool(server, tool, name, audit)
    return list(out.values())


def _schema(tool: types.Tool) -> dict[str, Any]:
    schema = dict(tool.inputSchema or {})
    if schema.get("type") != "object":
        schema = {"type": "object", "properties": {}, **{k: v for k, v in schema.items() if k != "type"}}
    return schema


def _agent_tool(server: McpServer, tool: types.Tool, name: str, audit: Audit) -> AgentTool:
    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        def progress(value: float, total: float | None, message: str | None) -> None:
            if on_update is None:
                return
            amount = f"{value:g}/{total:g}" if total is not None else f"{value:g}"
            text = f"progress {amount}" + (f": {message}" if message else "")
            details = {"progress": value, "total": total, "message": message}
            on_update(AgentToolResult(content=[TextContent(text=text)], details=details))

        started = time.monotonic()
        record: dict[str, Any] = {
            "event": "mcp.tool_call",
            "tool": name,
            "server": server.name,
            "mcp_tool": tool.name,
            "tool_call_id": tool_call_id,
        }
        try:
            answer = await _unless_aborted(
                server.call(tool.name, dict(params or {}), on_progress=progress), signal, name
            )
            result = to_tool_result(answer, server=server.name, tool=tool.name)
        except McpToolError as exc:
            audit({**record, "outcome": "error", "error": str(exc), "duration_ms": _ms(started)})
            raise
        audit({**record, "outcome": "ok", "duration_ms": _ms(started)})
        return result

    title = tool.title or (tool.annotations.title if tool.annotations is not None else None)
    return AgentTool(
        name=name,
        label=f"{server.name}: {title or tool.name}",
        description=tool.description or f"{tool.name} (MCP server {server.name})",
        parameters=_schema(tool),
        execute=execute,
        metadata={"origin": f"mcp:{server.name}", "mcpServer": server.name, "mcpTool": tool.name},
    )


async def _unless_aborted(work: Awaitable[T], signal: AbortSignal | None, name: str) -> T:
    """`work`'s result, or McpToolError as soon as `signal` is aborted (`work` is cancelled)."""
    if signal is None:
        return await work
    signal.throw_if_aborted()
    call = asyncio.ensure_future(work)
    aborted = asyncio.ensure_future(signal.wait())
    try:
        done, _ = await asyncio.wait({call, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (call, aborted):
            if not task.done():
                task.cancel()
        await asyncio.gather(call, aborted, return_exceptions=True)
    if call in done:
        return call.result()
    raise McpToolError(f"{name} was cancelled: the run was aborted")


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
