"""MCP servers: `mcp.list` (every configured server of every agent: state, tools, last error)
and `mcp.restart {name, agentId?}` (both `operator.admin`)."""

from __future__ import annotations

from typing import Any

import structlog

from gateway.methods.base import Call, MethodError
from gateway.methods.extensions_methods import actor
from gateway.protocol import params as p
from gateway.protocol.codes import ErrorCode

audit_log = structlog.get_logger("gateway.audit")


async def mcp_list(call: Call, params: p.NativeEmptyParams) -> Any:
    extensions = call.state.extensions
    return {"servers": extensions.mcp_status() if extensions is not None else []}


async def mcp_restart(call: Call, params: p.McpRestartParams) -> Any:
    from gateway.extensions.errors import UnknownServerError

    extensions = call.state.extensions
    if extensions is None:
        raise MethodError(ErrorCode.NOT_FOUND, f"no MCP server named {params.name!r} is configured")
    audit_log.warning("mcp.restart", server=params.name, agent_id=params.agent_id, actor=actor(call.conn))
    try:
        servers = await extensions.mcp_restart(params.name, params.agent_id)
    except UnknownServerError as exc:
        raise MethodError(ErrorCode.NOT_FOUND, str(exc)) from exc
    return {"servers": servers}
