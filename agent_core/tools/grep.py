"""The `grep` tool: search file contents for a regex or literal text.

Output follows the usual ``path:line: text`` form for matches and ``path-line- text`` for
context lines, paths relative to the searched directory. Binary files (a NUL byte near the
start) and symlinks met while walking are skipped.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from pathlib import Path
from typing import Any

import msgspec

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.messages import TextContent
from agent_core.tools.common import (
    as_mapping,
    check_not_aborted,
    get_bool,
    get_opt_int,
    get_opt_str,
    get_str,
    resolve_tool_path,
)
from agent_core.tools.truncate import DEFAULT_MAX_BYTES, format_size, truncate_head, truncate_line
from agent_core.tools.walk import compile_glob, walk_tree

DEFAULT_GREP_LIMIT = 100
_SNIFF_BYTES = 8192

GREP_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Search pattern (regex or literal string)"},
        "path": {
            "type": "string",
            "description": "Directory or file to search (default: current directory)",
        },
        "glob": {
            "type": "string",
            "description": "Filter files by glob pattern, e.g. '*.ts' or '**/*.spec.ts'",
        },
        "ignoreCase": {"type": "boolean", "description": "Case-insensitive search (default: false)"},
        "literal": {
            "type": "boolean",
            "description": "Treat pattern as literal string instead of regex (default: false)",
        },
        "context": {
            "type": "number",
            "description": "Number of lines to show before and after each match (default: 0)",
        },
        "limit": {
            "type": "number",
            "description": f"Maximum number of matches to return (default: {DEFAULT_GREP_LIMIT})",
        },
    },
    "required": ["pattern"],
}


class _Search(msgspec.Struct, dict=True):
    regex: re.Pattern[str]
    context: int
    limit: int
    signal: AbortSignal | None
    lines: list[str] = msgspec.field(default_factory=list)
    matches: int = 0
    long_lines: bool = False

    @property
    def full(self) -> bool:
        return self.matches >= self.limit

    def add(self, name: str, number: int, text: str, *, match: bool) -> None:
        shown, cut = truncate_line(text)
        self.long_lines = self.long_lines or cut
        self.lines.append(f"{name}:{number}: {shown}" if match else f"{name}-{number}- {shown}")

    def search_file(self, path: Path, name: str) -> None:
        try:
            with open(path, "rb") as probe:
                if b"\0" in probe.read(_SNIFF_BYTES):
                    return
            with open(path, encoding="utf-8", errors="replace", newline=None) as file:
                self._scan(file, name)
        except OSError:
            return  # unreadable files are skipped, as a directory search would

    def _scan(self, file: Any, name: str) -> None:
        before: deque[tuple[int, str]] = deque(maxlen=self.context or None)
        after = 0
        last_shown = 0
        for number, raw in enumerate(file, start=1):
            text = raw.rstrip("\n")
            if self.regex.search(text):
                if self.full:
                    return
                for old_number, old_text in before:
                    if old_number > last_shown:
                        self.add(name, old_number, old_text, match=False)
                before.clear()
                self.add(name, number, text, match=True)
                self.matches += 1
                last_shown = number
                after = self.context
            elif after > 0:
                self.add(name, number, text, match=False)
                last_shown = number
                after -= 1
            elif self.full:
                return
            elif self.context:
                before.append((number, text))


def _compile(pattern: str, *, literal: bool, ignore_case: bool) -> re.Pattern[str]:
    try:
        return re.compile(re.escape(pattern) if literal else pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(
            f"Invalid regex {pattern!r}: {exc}; set literal=true to search for the text as written"
        ) from None


def _grep(root: Path, display: str, glob: str | None, search: _Search, max_bytes: int) -> AgentToolResult:
    if not root.exists():
        raise ToolError(f"Path not found: {display}")
    if root.is_dir():
        matches_glob = compile_glob(glob) if glob else None
        for entry in walk_tree(root, search.signal):
            if search.full:
                break
            if entry.kind != "file" or (matches_glob and not matches_glob(entry.relative)):
                continue
            search.search_file(entry.path, entry.relative)
    else:
        search.search_file(root, root.name)
    if not search.lines:
        return AgentToolResult(content=[TextContent(text="No matches found")], details={"matches": 0})
    cut = truncate_head("\n".join(search.lines), max_lines=len(search.lines) + 1, max_bytes=max_bytes)
    notices: list[str] = []
    details: dict[str, Any] = {"matches": search.matches}
    if search.full:
        notices.append(
            f"[{search.limit} matches limit reached. Use limit={search.limit * 2} for more, "
            "or refine the pattern]"
        )
        details["matchLimitReached"] = search.limit
    if cut.truncated:
        notices.append(
            f"[{format_size(max_bytes)} output limit reached. Narrow the search with path or glob "
            "to see the rest]"
        )
        details["truncation"] = cut.details()
    if search.long_lines:
        notices.append("[Some lines were cut at 500 characters. Use read to see them in full]")
        details["linesTruncated"] = True
    text = cut.content + ("\n\n" + "\n".join(notices) if notices else "")
    return AgentToolResult(content=[TextContent(text=text)], details=details)


def create_grep_tool(workspace: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> AgentTool:
    """`grep {pattern, path?, glob?, ignoreCase?, literal?, context?, limit?}`."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(params)
        pattern = get_str(args, "pattern")
        display = get_opt_str(args, "path") or "."
        regex = _compile(pattern, literal=get_bool(args, "literal"), ignore_case=get_bool(args, "ignoreCase"))
        search = _Search(
            regex=regex,
            context=get_opt_int(args, "context", minimum=0) or 0,
            limit=get_opt_int(args, "limit", minimum=1) or DEFAULT_GREP_LIMIT,
            signal=signal,
        )
        glob = get_opt_str(args, "glob")
        check_not_aborted(signal, "Search")
        root = resolve_tool_path(workspace, display)
        return await asyncio.to_thread(_grep, root, display, glob, search, max_bytes)

    return AgentTool(
        name="grep",
        label="grep",
        description=(
            "Search file contents for a pattern. Returns matching lines with file paths and line "
            f"numbers. Output is truncated to {DEFAULT_GREP_LIMIT} matches (change with limit) or "
            f"{format_size(max_bytes)}; lines longer than 500 characters are cut. Skips binary "
            "files and .git directories."
        ),
        parameters=GREP_PARAMETERS,
        execute=execute,
    )
