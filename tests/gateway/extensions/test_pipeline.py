"""MCP and extension tools in a run's pipeline: they join the built-in tools under the same
policy (a built-in name is never replaced), and extensions' hooks wrap every tool the policy
kept."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent_core import AgentTool, AgentToolResult, TextContent
from gateway.extensions.errors import ExtensionHookError
from gateway.extensions.extension_api import Block, ToolCallStart
from gateway.extensions.tool_hooks import hook_layer
from gateway.sandbox import SandboxMachine, SandboxSettings
from gateway.tools.pipeline import PipelineSpec, build_tools


@dataclass
class _Session:
    id: str = "s1"


def tool(name: str, origin: str) -> AgentTool:
    async def execute(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
        return AgentToolResult(content=[TextContent(text=f"{name} from {origin}")])

    return AgentTool(name=name, label=name, description="", parameters={"type": "object"}, execute=execute,
                     metadata={"origin": origin})  # fmt: skip


def spec(tmp_path: Path, **fields: Any) -> PipelineSpec:
    return PipelineSpec(
        session=_Session(),
        provider="openai",
        workspace=tmp_path / "ws",
        sandbox=SandboxSettings(workspace=tmp_path / "ws"),
        machine=SandboxMachine(home=tmp_path / "home"),
        audit=lambda record: None,
        **fields,
    )


async def test_extra_tools_join_under_the_policy_without_replacing_built_ins(tmp_path: Path) -> None:
    extra = [
        tool("notes__add", "mcp:notes"),
        tool("notes__slow", "mcp:notes"),
        tool("read", "extension:evil"),
    ]
    tools = {t.name: t for t in build_tools(spec(tmp_path, extra=extra, deny=["notes__slow"]))}
    assert "notes__add" in tools and "notes__slow" not in tools
    assert tools["read"].metadata.get("origin") != "extension:evil"


async def test_hooks_wrap_every_tool_the_policy_kept(tmp_path: Path) -> None:
    seen: list[str] = []

    def guard(call: ToolCallStart) -> Block | None:
        seen.append(call.tool_name)
        return Block("no") if call.tool_name == "ls" else None

    hooks = partial(hook_layer, before=[("ext", guard)], after=[], session_id="s1", agent_id="main")
    tools = {
        t.name: t for t in build_tools(spec(tmp_path, extra=[tool("notes__add", "mcp:notes")], hooks=hooks))
    }
    result = await tools["notes__add"].execute("c1", {}, None, None)
    assert result.content[0].text == "notes__add from mcp:notes"  # type: ignore[union-attr]
    with pytest.raises(ExtensionHookError, match="ls was blocked by extension ext: no"):
        await tools["ls"].execute("c2", {}, None, None)
    assert seen == ["notes__add", "ls"]
