from __future__ import annotations

import base64
from pathlib import Path

import pytest

from agent_core.errors import ToolError
from agent_core.messages import ImageContent
from agent_core.tools import create_read_tool

from .conftest import call, text_of

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 30


async def test_reads_a_text_file_relative_to_the_workspace(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    result = await call(create_read_tool(workspace), {"path": "notes.txt"})
    assert text_of(result) == "alpha\nbeta"


async def test_offset_and_limit_select_a_window_and_say_how_to_continue(workspace: Path) -> None:
    (workspace / "f.txt").write_text("".join(f"l{i}\n" for i in range(1, 11)))
    result = await call(create_read_tool(workspace), {"path": "f.txt", "offset": 3, "limit": 2})
    assert text_of(result) == "l3\nl4\n\n[6 more lines in file. Use offset=5 to continue.]"


async def test_long_file_is_cut_at_the_line_limit_with_a_notice(workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"{i}\n" for i in range(1, 2501)))
    result = await call(create_read_tool(workspace), {"path": "big.txt"})
    text = text_of(result)
    assert text.startswith("1\n2\n")
    assert "\n2000\n" in text and "\n2001\n" not in text
    assert text.endswith("[Showing lines 1-2000 of 2500 (2000 line limit). Use offset=2001 to continue.]")
    assert result.details["truncated"] is True


async def test_wide_file_is_cut_at_the_byte_limit(workspace: Path) -> None:
    (workspace / "wide.txt").write_text(("y" * 999 + "\n") * 200)
    result = await call(create_read_tool(workspace, max_bytes=10_000), {"path": "wide.txt"})
    text = text_of(result)
    assert text.count("y" * 999) == 10
    assert "[Showing lines 1-10 of 200 (9.8KB limit). Use offset=11 to continue.]" in text


async def test_a_single_line_over_the_limit_points_to_bash(workspace: Path) -> None:
    (workspace / "min.js").write_text("z" * 100_000 + "\nshort\n")
    result = await call(create_read_tool(workspace), {"path": "min.js"})
    text = text_of(result)
    assert "Line 1 of min.js is 97.7KB" in text and "sed -n '1p' min.js" in text
    assert "z" * 1000 not in text
    second = await call(create_read_tool(workspace), {"path": "min.js", "offset": 2})
    assert text_of(second) == "short"


async def test_offset_beyond_the_end_is_an_error(workspace: Path) -> None:
    (workspace / "f.txt").write_text("a\nb\n")
    with pytest.raises(ToolError, match=r"Offset 5 is beyond the end of f\.txt \(2 lines\)"):
        await call(create_read_tool(workspace), {"path": "f.txt", "offset": 5})


async def test_missing_file_error_names_the_path(workspace: Path) -> None:
    with pytest.raises(ToolError, match=r"File not found: nope/missing\.txt"):
        await call(create_read_tool(workspace), {"path": "nope/missing.txt"})


async def test_directory_is_refused(workspace: Path) -> None:
    (workspace / "d").mkdir()
    with pytest.raises(ToolError, match="d is a directory; use ls"):
        await call(create_read_tool(workspace), {"path": "d"})


async def test_binary_file_is_refused(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    with pytest.raises(ToolError, match=r"blob\.bin is a binary file"):
        await call(create_read_tool(workspace), {"path": "blob.bin"})


async def test_image_comes_back_as_image_content(workspace: Path) -> None:
    (workspace / "pic.png").write_bytes(PNG)
    result = await call(create_read_tool(workspace), {"path": "pic.png"})
    images = [block for block in result.content if isinstance(block, ImageContent)]
    assert len(images) == 1
    assert images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data) == PNG
    assert "image/png" in text_of(result)


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (b"\xff\xd8\xff\xe0" + b"\x00" * 20, "image/jpeg"),
        (b"GIF89a" + b"\x00" * 20, "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 20, "image/webp"),
    ],
)
async def test_other_image_types_are_recognised_by_content(workspace: Path, head: bytes, mime: str) -> None:
    (workspace / "picture").write_bytes(head)
    result = await call(create_read_tool(workspace), {"path": "picture"})
    assert [block.mime_type for block in result.content if isinstance(block, ImageContent)] == [mime]


async def test_oversized_image_is_refused(workspace: Path) -> None:
    (workspace / "huge.png").write_bytes(PNG + b"\x00" * 2000)
    with pytest.raises(ToolError, match=r"Image huge\.png is .* over the .* limit"):
        await call(create_read_tool(workspace, max_image_bytes=1000), {"path": "huge.png"})


async def test_empty_file(workspace: Path) -> None:
    (workspace / "empty").write_text("")
    assert text_of(await call(create_read_tool(workspace), {"path": "empty"})) == "(empty file)"


async def test_absolute_path_and_bad_arguments(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "abs.txt"
    outside.write_text("absolute\n")
    tool = create_read_tool(workspace)
    assert text_of(await call(tool, {"path": str(outside)})) == "absolute"
    with pytest.raises(ToolError, match="'offset' must be at least 1"):
        await call(tool, {"path": str(outside), "offset": 0})
    with pytest.raises(ToolError, match="Missing required argument 'path'"):
        await call(tool, {})
