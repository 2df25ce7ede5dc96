"""The built-in coding tool set, rooted at one workspace."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agent_core.agent_types import AgentTool
from agent_core.tools.bash import create_bash_tool
from agent_core.tools.edit import create_edit_tool
from agent_core.tools.find import create_find_tool
from agent_core.tools.grep import create_grep_tool
from agent_core.tools.ls import create_ls_tool
from agent_core.tools.read import create_read_tool
from agent_core.tools.runner import CommandRunner
from agent_core.tools.write import create_write_tool


def create_coding_tools(
    workspace: Path,
    *,
    runner: CommandRunner | None = None,
    env: Mapping[str, str] | None = None,
    default_timeout_s: float | None = None,
) -> list[AgentTool]:
    """`read`, `write`, `edit`, `bash`, `grep`, `find`, `ls`, all resolving relative paths against
    `workspace`; `bash` runs there through `runner` (a `LocalRunner` when ``None``)."""
    root = Path(workspace)
    return [
        create_read_tool(root),
        create_write_tool(root),
        create_edit_tool(root),
        create_bash_tool(root, runner=runner, env=env, default_timeout_s=default_timeout_s),
        create_grep_tool(root),
        create_find_tool(root),
        create_ls_tool(root),
    ]
