"""The `read` tool: text files by line window, images as image content, binaries refused.

Files are read in chunks, never whole, so a huge file (or one enormous line) costs only the
window that is returned plus a streaming count of its remaining lines.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from pathlib import Path
from typing import IO, Any

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.messages import ImageContent, TextContent
from agent_core.tools.common import (
    as_mapping,
    check_not_aborted,
    get_opt_int,
    get_str,
    resolve_tool_path,
)
from agent_core.tools.truncate import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, format_size

DEFAULT_MAX_IMAGE_BYTES = 5 * 1024 * 1024
_SNIFF_BYTES = 8192
_CHUNK = 64 * 1024

READ_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path to the file to read (relative or absolute)"},
        "offset": {"type": "number", "description": "Line number to start reading from (1-indexed)"},
        "limit": {"type": "number", "description": "Maximum number of lines to read"},
    },
    "required": ["path"],
}


def image_mime_type(head: bytes) -> str | None:
    """The MIME type of a png, jpeg, gif or webp image from its first bytes, else ``None``."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return None


class _LineReader:
    """Yields a binary file's lines one by one, keeping at most `max_line_bytes` of each."""

    def __init__(self, file: IO[bytes], max_line_bytes: int) -> None:
        self._file = file
        self._max = max_line_bytes
        self._buf = b""
        self._pos = 0

    def _fill(self) -> bool:
        chunk = self._file.read(_CHUNK)
        if not chunk:
            return False
        self._buf = self._buf[self._pos :] + chunk
        self._pos = 0
        return True

    def next_line(self) -> tuple[bytes, int] | None:
        """The next line (newline excluded, cut to the cap) and its full length; ``None`` at EOF."""
        kept = bytearray()
        length = 0
        while True:
            newline = self._buf.find(b"\n", self._pos)
            end = newline if newline >= 0 else len(self._buf)
            room = self._max - len(kept)
            if room > 0:
                kept += self._buf[self._pos : min(end, self._pos + room)]
            length += end - self._pos
            self._pos = end
            if newline >= 0:
                self._pos = newline + 1
                return bytes(kept), length
            if not self._fill():
                return (bytes(kept), length) if length else None

    def count_rest(self) -> int:
        """Number of lines not yet read (consumes the file)."""
        count = self._buf.count(b"\n", self._pos)
        last = self._buf[-1:] if len(self._buf) > self._pos else b""
        while True:
            chunk = self._file.read(_CHUNK * 16)
            if not chunk:
                break
            count += chunk.count(b"\n")
            last = chunk[-1:]
        return count + (1 if last and last != b"\n" else 0)


def _read_text(
    file: IO[bytes], *, display: str, offset: int, limit: int | None, max_lines: int, max_bytes: int
) -> AgentToolResult:
    reader = _LineReader(file, max_bytes + 1)
    start = offset - 1
    consumed = 0
    while consumed < start and reader.next_line() is not None:
        consumed += 1
    if consumed < start:
        raise ToolError(
            f"Offset {offset} is beyond the end of {display} ({consumed} lines); use a smaller offset"
        )
    wanted = min(limit, max_lines) if limit is not None else max_lines
    lines: list[str] = []
    used = 0
    cut_by_bytes = False
    while len(lines) < wanted:
        item = reader.next_line()
        if item is None:
            break
        consumed += 1
        data, length = item
        if not lines and length > max_bytes:
            rest = reader.count_rest()
            return AgentToolResult(
                content=[
                    TextContent(
                        text=f"[Line {offset} of {display} is {format_size(length)}, over the "
                        f"{format_size(max_bytes)} limit of read. See part of it with bash: "
                        f"sed -n '{offset}p' {display} | head -c {max_bytes}]"
                    )
                ],
                details={"totalLines": consumed + rest, "longLine": offset},
            )
        size = length + (1 if lines else 0)
        if used + size > max_bytes:
            cut_by_bytes = True
            break
        lines.append(data.decode("utf-8", errors="replace"))
        used += size
    total = consumed + reader.count_rest()
    text = "\n".join(lines)
    end_line = start + len(lines)
    remaining = total - end_line
    details: dict[str, Any] = {"totalLines": total, "startLine": offset, "endLine": end_line}
    if remaining > 0:
        if cut_by_bytes or limit is None or limit > max_lines:
            limit_text = f"{format_size(max_bytes)} limit" if cut_by_bytes else f"{max_lines} line limit"
            notice = (
                f"[Showing lines {offset}-{end_line} of {total} ({limit_text}). "
                f"Use offset={end_line + 1} to continue.]"
            )
            details["truncated"] = True
        else:
            notice = f"[{remaining} more lines in file. Use offset={end_line + 1} to continue.]"
        text = f"{text}\n\n{notice}"
    if not text:
        text = "(empty file)"
    return AgentToolResult(content=[TextContent(text=text)], details=details)


def _read(
    path: Path,
    *,
    display: str,
    offset: int,
    limit: int | None,
    max_lines: int,
    max_bytes: int,
    max_image_bytes: int,
) -> AgentToolResult:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ToolError(f"File not found: {display}; check the path with ls or find") from None
    except NotADirectoryError:
        raise ToolError(f"File not found: {display} (a parent path is not a directory)") from None
    except PermissionError:
        raise ToolError(f"Permission denied reading {display}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{display} is a directory; use ls to list it")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{display} is not a regular file")
    try:
        with open(path, "rb") as file:
            head = file.read(_SNIFF_BYTES)
            mime = image_mime_type(head)
            if mime is not None:
                if info.st_size > max_image_bytes:
                    raise ToolError(
                        f"Image {display} is {format_size(info.st_size)}, over the "
                        f"{format_size(max_image_bytes)} limit; resize it first"
                    )
                data = head + file.read()
                return AgentToolResult(
                    content=[
                        TextContent(text=f"Read image file {display} [{mime}]"),
                        ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=mime),
                    ],
                    details={"mimeType": mime, "bytes": len(data)},
                )
            if b"\0" in head:
                raise ToolError(
                    f"{display} is a binary file ({format_size(info.st_size)}); read only shows text "
                    "and images (png, jpeg, gif, webp)"
                )
            file.seek(0)
            return _read_text(
                file, display=display, offset=offset, limit=limit, max_lines=max_lines, max_bytes=max_bytes
            )
    except PermissionError:
        raise ToolError(f"Permission denied reading {display}") from None


def create_read_tool(
    workspace: Path,
    *,
    max_lines: int = DEFAULT_MAX_LINES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
) -> AgentTool:
    """`read {path, offset?, limit?}`: a window of a text file's lines, or an image."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(params)
        display = get_str(args, "path")
        offset = get_opt_int(args, "offset", minimum=1) or 1
        limit = get_opt_int(args, "limit", minimum=1)
        check_not_aborted(signal, "Read")
        path = resolve_tool_path(workspace, display)
        return await asyncio.to_thread(
            _read,
            path,
            display=display,
            offset=offset,
            limit=limit,
            max_lines=max_lines,
            max_bytes=max_bytes,
            max_image_bytes=max_image_bytes,
        )

    return AgentTool(
        name="read",
        label="read",
        description=(
            "Read the contents of a file. Supports text files and images (png, jpeg, gif, webp); "
            "images are returned as attachments. Text output is truncated to "
            f"{max_lines} lines or {format_size(max_bytes)}, whichever is hit first; use offset "
            "and limit to read large files in parts, continuing at the offset the notice gives."
        ),
        parameters=READ_PARAMETERS,
        execute=execute,
    )
