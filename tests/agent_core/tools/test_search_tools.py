"""grep, find and ls."""

from __future__ import annotations

import fnmatch
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.errors import ToolError
from agent_core.tools import compile_glob, create_find_tool, create_grep_tool, create_ls_tool

from .conftest import call, text_of


@pytest.fixture
def tree(workspace: Path) -> Path:
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "app.py").write_text("import os\nTODO = 1\nprint('todo later')\n")
    (workspace / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'TODO: x.y'\n")
    (workspace / "src" / "pkg" / "util.ts").write_text("export const TODO = 2;\n")
    (workspace / "README.md").write_text("# readme\nno tasks here\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("TODO in git\n")
    (workspace / "data.bin").write_bytes(b"TODO\x00\x01\x02")
    (workspace / ".hidden").write_text("TODO hidden\n")
    return workspace


async def test_grep_lists_matches_with_paths_and_line_numbers(tree: Path) -> None:
    text = text_of(await call(create_grep_tool(tree), {"pattern": "TODO"}))
    assert text.split("\n") == [
        ".hidden:1: TODO hidden",
        "src/app.py:2: TODO = 1",
        "src/pkg/util.py:2:     return 'TODO: x.y'",
        "src/pkg/util.ts:1: export const TODO = 2;",
    ]


async def test_grep_options(tree: Path) -> None:
    tool = create_grep_tool(tree)
    insensitive = text_of(
        await call(tool, {"pattern": "todo", "ignoreCase": True, "path": "src", "glob": "*.py"})
    )
    assert insensitive.split("\n") == [
        "app.py:2: TODO = 1",
        "app.py:3: print('todo later')",
        "pkg/util.py:2:     return 'TODO: x.y'",
    ]
    literal = text_of(await call(tool, {"pattern": "x.y", "literal": True}))
    assert literal == "src/pkg/util.py:2:     return 'TODO: x.y'"
    single = text_of(await call(tool, {"pattern": "import", "path": "src/app.py"}))
    assert single == "app.py:1: import os"
    assert text_of(await call(tool, {"pattern": "nothing-matches-this"})) == "No matches found"


async def test_grep_context_lines(tree: Path) -> None:
    text = text_of(
        await call(create_grep_tool(tree), {"pattern": "^TODO", "path": "src/app.py", "context": 1})
    )
    assert text.split("\n") == ["app.py-1- import os", "app.py:2: TODO = 1", "app.py-3- print('todo later')"]


async def test_grep_match_limit_notice(workspace: Path) -> None:
    (workspace / "many.txt").write_text("hit\n" * 50)
    result = await call(create_grep_tool(workspace), {"pattern": "hit", "limit": 5})
    text = text_of(result)
    assert text.count("many.txt:") == 5
    assert "[5 matches limit reached. Use limit=10 for more, or refine the pattern]" in text
    assert result.details["matchLimitReached"] == 5


async def test_grep_output_byte_limit_and_long_lines(workspace: Path) -> None:
    (workspace / "wide.txt").write_text(("match " + "w" * 1000 + "\n") * 300)
    text = text_of(await call(create_grep_tool(workspace), {"pattern": "match", "limit": 1000}))
    assert "[50.0KB output limit reached. Narrow the search with path or glob to see the rest]" in text
    assert "[Some lines were cut at 500 characters. Use read to see them in full]" in text
    assert "w" * 600 not in text


async def test_grep_errors(tree: Path) -> None:
    tool = create_grep_tool(tree)
    with pytest.raises(ToolError, match=r"Invalid regex '\(unclosed'.*set literal=true"):
        await call(tool, {"pattern": "(unclosed"})
    with pytest.raises(ToolError, match="Path not found: missing"):
        await call(tool, {"pattern": "x", "path": "missing"})


async def test_find_by_name_and_by_path(tree: Path) -> None:
    tool = create_find_tool(tree)
    assert text_of(await call(tool, {"pattern": "*.py"})).split("\n") == ["src/app.py", "src/pkg/util.py"]
    assert text_of(await call(tool, {"pattern": "src/**/*.ts"})) == "src/pkg/util.ts"
    assert text_of(await call(tool, {"pattern": "**/util.{py,ts}"})).split("\n") == [
        "src/pkg/util.py",
        "src/pkg/util.ts",
    ]
    assert text_of(await call(tool, {"pattern": "pkg"})) == "src/pkg/"
    assert text_of(await call(tool, {"pattern": "*.py", "path": "src/pkg"})) == "util.py"
    assert text_of(await call(tool, {"pattern": "config"})) == "No files found matching 'config'"


async def test_find_limit_and_errors(workspace: Path) -> None:
    for i in range(20):
        (workspace / f"f{i:02}.txt").write_text("")
    tool = create_find_tool(workspace)
    result = await call(tool, {"pattern": "*.txt", "limit": 3})
    assert text_of(result) == (
        "f00.txt\nf01.txt\nf02.txt\n\n[3 results limit reached. Use limit=6 for more, or refine the pattern]"
    )
    with pytest.raises(ToolError, match=r"f00\.txt is not a directory"):
        await call(tool, {"pattern": "*", "path": "f00.txt"})


async def test_ls_lists_sorted_entries_with_directory_markers(tree: Path) -> None:
    text = text_of(await call(create_ls_tool(tree), {}))
    assert text.split("\n") == [".git/", ".hidden", "data.bin", "README.md", "src/"]
    assert text_of(await call(create_ls_tool(tree), {"path": "src"})) == "app.py\npkg/"


async def test_ls_limit_empty_and_errors(workspace: Path) -> None:
    tool = create_ls_tool(workspace)
    (workspace / "empty").mkdir()
    assert text_of(await call(tool, {"path": "empty"})) == "(empty directory)"
    for i in range(5):
        (workspace / f"n{i}").write_text("")
    text = text_of(await call(tool, {"limit": 2}))
    assert text == "empty/\nn0\n\n[2 entries limit reached (6 in total). Use limit=4 for more]"
    with pytest.raises(ToolError, match="n0 is not a directory; use read"):
        await call(tool, {"path": "n0"})
    with pytest.raises(ToolError, match="Path not found: nowhere"):
        await call(tool, {"path": "nowhere"})


async def test_walks_do_not_follow_symlinks(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TODO secret\n")
    (workspace / "link").symlink_to(outside)
    (workspace / "file-link.txt").symlink_to(outside / "secret.txt")
    assert text_of(await call(create_grep_tool(workspace), {"pattern": "secret"})) == "No matches found"
    found = text_of(await call(create_find_tool(workspace), {"pattern": "*"}))
    assert found.split("\n") == ["file-link.txt", "link"]


@given(
    pattern=st.lists(st.sampled_from(["*", "?", "a", "b", ".", "[ab]", "[!a]"]), max_size=8).map("".join),
    name=st.text(alphabet="ab.", max_size=10),
)
def test_glob_matches_like_fnmatch_within_a_name(pattern: str, name: str) -> None:
    if "**" in pattern:
        pattern = pattern.replace("**", "*")
    assert compile_glob(pattern)(name) == fnmatch.fnmatchcase(name, pattern)


def test_pathological_globs_do_not_backtrack() -> None:
    started = time.monotonic()
    for pattern in ("*a" * 200 + "b", "*?" * 100 + "x", "**/" * 30 + "*a" * 50 + "b"):
        assert not compile_glob(pattern)("a" * 300)
    assert time.monotonic() - started < 2
