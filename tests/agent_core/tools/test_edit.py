from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.errors import ToolError
from agent_core.tools import create_edit_tool, prepare_edit_arguments

from .conftest import call, text_of

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


async def test_replaces_the_exact_text_and_returns_a_diff(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    result = await call(
        create_edit_tool(workspace),
        {"path": "m.py", "edits": [{"oldText": "return a - b", "newText": "return a - b - 0"}]},
    )
    assert (workspace / "m.py").read_text() == SOURCE.replace("return a - b", "return a - b - 0")
    assert text_of(result) == "Successfully replaced 1 block in m.py."
    assert result.details["firstChangedLine"] == 6
    diff = result.details["diff"]
    assert "-    return a - b" in diff and "+    return a - b - 0" in diff
    assert diff.startswith("--- m.py")


async def test_several_edits_apply_against_the_original(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    await call(
        create_edit_tool(workspace),
        {
            "path": "m.py",
            "edits": [
                {"oldText": "def sub(a, b):", "newText": "def minus(a, b):"},
                {"oldText": "def add(a, b):", "newText": "def plus(a, b):"},
            ],
        },
    )
    text = (workspace / "m.py").read_text()
    assert "def plus(a, b):" in text and "def minus(a, b):" in text


async def test_missing_text_is_a_clear_error(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    with pytest.raises(
        ToolError, match=r"edits\[0\]\.oldText\) was not found in m\.py; it must match exactly"
    ):
        await call(
            create_edit_tool(workspace),
            {"path": "m.py", "edits": [{"oldText": "return a*b", "newText": "x"}]},
        )
    assert (workspace / "m.py").read_text() == SOURCE


async def test_ambiguous_text_asks_for_more_context(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    with pytest.raises(ToolError, match=r"occurs 2 times in m\.py; add more surrounding context"):
        await call(
            create_edit_tool(workspace), {"path": "m.py", "edits": [{"oldText": "(a, b):", "newText": "()"}]}
        )
    assert (workspace / "m.py").read_text() == SOURCE


async def test_overlapping_edits_are_refused(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    with pytest.raises(ToolError, match=r"edits\[0\] and edits\[1\] overlap"):
        await call(
            create_edit_tool(workspace),
            {
                "path": "m.py",
                "edits": [
                    {"oldText": "def add(a, b):\n    return", "newText": "x"},
                    {"oldText": "return a + b", "newText": "y"},
                ],
            },
        )


async def test_no_op_and_empty_edits_are_refused(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    tool = create_edit_tool(workspace)
    with pytest.raises(ToolError, match="makes no change"):
        await call(tool, {"path": "m.py", "edits": [{"oldText": "add", "newText": "add"}]})
    with pytest.raises(ToolError, match=r"oldText is empty"):
        await call(tool, {"path": "m.py", "edits": [{"oldText": "", "newText": "x"}]})


async def test_missing_file(workspace: Path) -> None:
    with pytest.raises(ToolError, match=r"File not found: nope\.py; use write"):
        await call(
            create_edit_tool(workspace), {"path": "nope.py", "edits": [{"oldText": "a", "newText": "b"}]}
        )


def test_prepare_arguments_converts_the_legacy_shape() -> None:
    tool_prepare = prepare_edit_arguments
    assert tool_prepare({"path": "f", "oldText": "a", "newText": "b"}) == {
        "path": "f",
        "edits": [{"oldText": "a", "newText": "b"}],
    }
    assert tool_prepare({"path": "f", "edits": '[{"oldText": "a", "newText": "b"}]'}) == {
        "path": "f",
        "edits": [{"oldText": "a", "newText": "b"}],
    }
    untouched = {"path": "f", "edits": [{"oldText": "a", "newText": "b"}]}
    assert tool_prepare(untouched) == untouched


async def test_legacy_arguments_work_end_to_end(workspace: Path) -> None:
    (workspace / "m.py").write_text(SOURCE)
    tool = create_edit_tool(workspace)
    assert tool.prepare_arguments is not None
    prepared = tool.prepare_arguments({"path": "m.py", "oldText": "a + b", "newText": "b + a"})
    await call(tool, prepared)
    assert "return b + a" in (workspace / "m.py").read_text()
    # execute tolerates the legacy shape even when nobody prepared it
    await call(tool, {"path": "m.py", "oldText": "b + a", "newText": "a + b"})
    assert (workspace / "m.py").read_text() == SOURCE


async def test_crlf_files_keep_their_line_endings(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree\r\n")
    await call(
        create_edit_tool(workspace), {"path": "w.txt", "edits": [{"oldText": "one\ntwo", "newText": "1\n2"}]}
    )
    assert (workspace / "w.txt").read_bytes() == b"\xef\xbb\xbf1\r\n2\r\nthree\r\n"
