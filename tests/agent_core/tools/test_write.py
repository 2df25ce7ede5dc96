from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.errors import ToolError
from agent_core.tools import create_write_tool

from .conftest import call, text_of


async def test_write_creates_parent_directories(workspace: Path) -> None:
    result = await call(create_write_tool(workspace), {"path": "a/b/c.txt", "content": "héllo"})
    assert (workspace / "a/b/c.txt").read_text() == "héllo"
    assert text_of(result) == "Successfully wrote 6 bytes to a/b/c.txt"


async def test_write_overwrites(workspace: Path) -> None:
    (workspace / "f.txt").write_text("old content that is longer")
    await call(create_write_tool(workspace), {"path": "f.txt", "content": "new"})
    assert (workspace / "f.txt").read_text() == "new"


async def test_write_to_a_directory_is_refused(workspace: Path) -> None:
    (workspace / "d").mkdir()
    with pytest.raises(ToolError, match="d is a directory"):
        await call(create_write_tool(workspace), {"path": "d", "content": "x"})


async def test_write_below_a_file_is_refused(workspace: Path) -> None:
    (workspace / "f").write_text("")
    with pytest.raises(ToolError, match="a parent of it is a file"):
        await call(create_write_tool(workspace), {"path": "f/g.txt", "content": "x"})
