"""`McpRegistry` and `mcp_tools`: an agent's servers as its tools, `<server>__<tool>`, through
the supervised servers, and a reload that replaces what changed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_core import AbortController, AgentToolResult, ToolCall, ToolError
from agent_core.validation import validate_tool_arguments
from gateway.config import GatewayConfig, load_config
from gateway.extensions.errors import McpUnavailableError, UnknownServerError
from gateway.extensions.mcp_registry import McpRegistry
from gateway.extensions.mcp_tools import model_tool_name
from gateway.sandbox import SandboxMachine, SandboxSettings
from tests.gateway.extensions.support import NOTES


def config_for(tmp_path: Path, *, extra: str = "", servers: str | None = None) -> GatewayConfig:
    table = f"""
[[mcp_servers]]
name = "notes"
command = "{sys.executable}"
args = ["{NOTES}", "stdio"]
sandbox = false
idle_timeout_s = 0
{extra}
"""
    path = tmp_path / "gateway.toml"
    path.write_text(servers if servers is not None else table)
    return load_config(path, env={"HOME": str(tmp_path), "GATEWAY_HOME": str(tmp_path / "home")})


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[McpRegistry]:
    config = config_for(tmp_path)
    machine = SandboxMachine(home=config.home)
    registry = McpRegistry(config, machine=machine, env={"PATH": "/usr/bin:/bin"})
    yield registry
    await registry.aclose()
    machine.close()


def sandbox(tmp_path: Path) -> SandboxSettings:
    return SandboxSettings(workspace=tmp_path / "workspace", mode="unsafe-host")


async def run(tool: Any, args: dict[str, Any], updates: list[AgentToolResult] | None = None) -> str:
    call = ToolCall(id="call-1", name=tool.name, arguments=args)
    valid = validate_tool_arguments(tool, call)
    result = await tool.execute("call-1", valid, None, updates.append if updates is not None else None)
    return "".join(block.text for block in result.content)


async def test_an_agents_servers_become_prefixed_tools_with_their_schemas(
    tmp_path: Path, registry: McpRegistry
) -> None:
    audit: list[dict[str, Any]] = []
    assert registry.status()[0]["state"] == "stopped"
    tools = {tool.name: tool for tool in await registry.tools_for("main", sandbox(tmp_path), audit.append)}
    assert {"notes__add", "notes__count", "notes__fail"} <= set(tools)
    add = tools["notes__add"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.metadata["origin"] == "mcp:notes"
    # The same coercions as the built-in tools: "2" is an integer for an integer parameter.
    assert await run(add, {"a": "2", "b": 3}) == "5"
    with pytest.raises(ToolError, match='Validation failed for tool "notes__add"'):
        validate_tool_arguments(add, ToolCall(id="c", name="notes__add", arguments={"a": "two", "b": 1}))
    assert audit[0]["event"] == "mcp.server_start"
    call = next(record for record in audit if record["event"] == "mcp.tool_call")
    assert call["tool"] == "notes__add" and call["outcome"] == "ok" and call["server"] == "notes"
    row = registry.status()[0]
    assert row["state"] == "ready" and "notes__add" in row["tools"] and row["agentId"] == "main"


async def test_progress_becomes_tool_updates_and_errors_fail_the_call(
    tmp_path: Path, registry: McpRegistry
) -> None:
    audit: list[dict[str, Any]] = []
    tools = {tool.name: tool for tool in await registry.tools_for("main", sandbox(tmp_path), audit.append)}
    updates: list[AgentToolResult] = []
    assert await run(tools["notes__count"], {"steps": 2}, updates) == "counted to 2"
    assert ["".join(b.text for b in u.content) for u in updates] == [
        "progress 1/2: step 1",
        "progress 2/2: step 2",
    ]
    assert updates[0].details == {"progress": 1, "total": 2, "message": "step 1"}
    with pytest.raises(ToolError, match="no such note"):
        await run(tools["notes__fail"], {"message": "no such note"})
    assert audit[-1]["outcome"] == "error"


async def test_a_reload_replaces_a_changed_server_and_retires_a_removed_one(
    tmp_path: Path, registry: McpRegistry
) -> None:
    old = {tool.name: tool for tool in await registry.tools_for("main", sandbox(tmp_path), lambda r: None)}
    registry.configure(config_for(tmp_path, extra="timeout_s = 5"))
    fresh = {tool.name: tool for tool in await registry.tools_for("main", sandbox(tmp_path), lambda r: None)}
    assert await run(fresh["notes__add"], {"a": 1, "b": 2}) == "3"
    with pytest.raises(McpUnavailableError, match="no longer configured"):
        await run(old["notes__add"], {"a": 1, "b": 2})
    registry.configure(config_for(tmp_path, servers=""))
    assert await registry.tools_for("main", sandbox(tmp_path), lambda r: None) == []
    assert registry.status() == []
    with pytest.raises(McpUnavailableError, match="no longer configured"):
        await run(fresh["notes__add"], {"a": 1, "b": 2})


async def test_restart_names_a_configured_server(tmp_path: Path, registry: McpRegistry) -> None:
    await registry.tools_for("main", sandbox(tmp_path), lambda r: None)
    before = registry.status()[0]["pid"]
    rows = await registry.restart("notes")
    assert rows[0]["state"] == "ready" and rows[0]["pid"] != before and rows[0]["restarts"] == 1
    with pytest.raises(UnknownServerError, match="no MCP server named 'nope'"):
        await registry.restart("nope")


def test_tool_names_are_made_safe_for_models() -> None:
    assert model_tool_name("notes", "add") == "notes__add"
    assert model_tool_name("notes", "files/read.v2") == "notes__files_read_v2"
    assert len(model_tool_name("notes", "x" * 100)) == 64


async def test_an_aborted_run_ends_its_call_at_once(tmp_path: Path, registry: McpRegistry) -> None:
    tools = {tool.name: tool for tool in await registry.tools_for("main", sandbox(tmp_path), lambda r: None)}
    controller = AbortController()
    call = asyncio.ensure_future(tools["notes__slow"].execute("c1", {"seconds": 50}, controller.signal, None))
    await asyncio.sleep(0.3)
    controller.abort("user")
    with pytest.raises(ToolError, match="notes__slow was cancelled: the run was aborted"):
        await call
    assert await run(tools["notes__add"], {"a": 1, "b": 1}) == "2"
