"""Shared fixtures of the built-in tool tests: a fresh workspace and a way to call a tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.messages import TextContent


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def call(
    tool: AgentTool,
    params: dict[str, Any],
    *,
    signal: AbortSignal | None = None,
    on_update: ToolUpdateCallback | None = None,
) -> AgentToolResult:
    return await tool.execute("call-1", params, signal, on_update)


def text_of(result: AgentToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))
