"""The `edit` tool: exact-match replacement of one or more text blocks in a file.

Every `oldText` must occur exactly once in the file as it was before the edit; blocks must not
overlap. Matching ignores the difference between CRLF and LF line endings (the file keeps its
own), and a UTF-8 byte order mark is preserved.
"""

from __future__ import annotations

import asyncio
import difflib
import itertools
import json
from pathlib import Path
from typing import Any

import msgspec

from agent_core.abort import AbortSignal
from agent_core.agent_types import AgentTool, AgentToolResult, ToolUpdateCallback
from agent_core.errors import ToolError
from agent_core.messages import TextContent
from agent_core.tools.common import as_mapping, check_not_aborted, get_str, resolve_tool_path
from agent_core.tools.write import write_file

MAX_DIFF_LINES = 200
_BOM = "\ufeff"

EDIT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path to the file to edit (relative or absolute)"},
        "edits": {
            "type": "array",
            "description": (
                "Replacements to make. Each oldText must match the file exactly once, including "
                "whitespace and indentation; edits must not overlap."
            ),
            "items": {
                "type": "object",
                "properties": {
                    "oldText": {"type": "string", "description": "Exact text to find and replace"},
                    "newText": {"type": "string", "description": "Text to replace it with"},
                },
                "required": ["oldText", "newText"],
            },
            "minItems": 1,
        },
    },
    "required": ["path", "edits"],
}


def prepare_edit_arguments(args: Any) -> Any:
    """Accept the legacy single-edit shape ``{path, oldText, newText}`` and an `edits` array sent
    as a JSON string; anything else is returned unchanged for validation to judge."""
    if not isinstance(args, dict):
        return args
    prepared = dict(args)
    edits = prepared.get("edits")
    if isinstance(edits, str):
        try:
            edits = json.loads(edits)
        except ValueError:
            return prepared
        prepared["edits"] = edits
    if "oldText" in prepared or "newText" in prepared:
        legacy = {"oldText": prepared.pop("oldText", None), "newText": prepared.pop("newText", "")}
        prepared["edits"] = [*edits, legacy] if isinstance(edits, list) else [legacy]
    return prepared


class _Span(msgspec.Struct, frozen=True, dict=True):
    start: int
    end: int
    new_text: str
    index: int


def _occurrences(text: str, needle: str, limit: int = 1000) -> list[int]:
    """Start offsets of `needle` in `text`, overlapping ones included (at most `limit`)."""
    found: list[int] = []
    position = text.find(needle)
    while position >= 0 and len(found) < limit:
        found.append(position)
        position = text.find(needle, position + 1)
    return found


def _edit_list(args: Any) -> list[tuple[str, str]]:
    edits = args.get("edits")
    if not isinstance(edits, list) or not edits:
        raise ToolError("Argument 'edits' must be a non-empty list of {oldText, newText} objects")
    pairs: list[tuple[str, str]] = []
    for index, edit in enumerate(edits):
        if not isinstance(edit, dict):
            raise ToolError(f"edits[{index}] must be an object with oldText and newText")
        old, new = edit.get("oldText"), edit.get("newText")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ToolError(f"edits[{index}] needs string oldText and newText")
        if not old:
            raise ToolError(f"edits[{index}].oldText is empty; give the exact text to replace")
        if old == new:
            raise ToolError(f"edits[{index}] makes no change: oldText and newText are identical")
        pairs.append((old.replace("\r\n", "\n"), new.replace("\r\n", "\n")))
    return pairs


def _plan(text: str, pairs: list[tuple[str, str]], display: str) -> list[_Span]:
    spans: list[_Span] = []
    for index, (old, new) in enumerate(pairs):
        found = _occurrences(text, old)
        if not found:
            raise ToolError(
                f"The text to replace (edits[{index}].oldText) was not found in {display}; it must "
                "match exactly, including whitespace and indentation (read the file and copy it)"
            )
        if len(found) > 1:
            count = f"{len(found)}+" if len(found) >= 1000 else str(len(found))
            raise ToolError(
                f"The text to replace (edits[{index}].oldText) occurs {count} times in {display}; "
                "add more surrounding context so it matches exactly once"
            )
        spans.append(_Span(found[0], found[0] + len(old), new, index))
    spans.sort(key=lambda span: span.start)
    for before, after in itertools.pairwise(spans):
        if after.start < before.end:
            raise ToolError(
                f"edits[{before.index}] and edits[{after.index}] overlap in {display}; "
                "merge them into one edit"
            )
    return spans


def _diff(old: str, new: str, display: str) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), fromfile=display, tofile=display, n=3, lineterm=""
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        more = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"... ({more} more diff lines)"]
    return "\n".join(lines)


def _edit(path: Path, display: str, pairs: list[tuple[str, str]]) -> AgentToolResult:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"File not found: {display}; use write to create a new file") from None
    except IsADirectoryError:
        raise ToolError(f"{display} is a directory, not a file") from None
    except PermissionError:
        raise ToolError(f"Permission denied reading {display}") from None
    try:
        original = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{display} is not UTF-8 text; edit only changes text files") from None
    bom = _BOM if original.startswith(_BOM) else ""
    body = original[len(bom) :]
    crlf = "\r\n" in body
    text = body.replace("\r\n", "\n") if crlf else body
    spans = _plan(text, pairs, display)
    updated = text
    for span in reversed(spans):
        updated = updated[: span.start] + span.new_text + updated[span.end :]
    written = bom + (updated.replace("\n", "\r\n") if crlf else updated)
    write_file(path, display, written.encode("utf-8"))
    first_line = text.count("\n", 0, spans[0].start) + 1
    blocks = "1 block" if len(spans) == 1 else f"{len(spans)} blocks"
    return AgentToolResult(
        content=[TextContent(text=f"Successfully replaced {blocks} in {display}.")],
        details={"diff": _diff(text, updated, display), "firstChangedLine": first_line},
    )


def create_edit_tool(workspace: Path) -> AgentTool:
    """`edit {path, edits: [{oldText, newText}]}`; also accepts the legacy ``{oldText, newText}``."""

    async def execute(
        tool_call_id: str, params: Any, signal: AbortSignal | None, on_update: ToolUpdateCallback | None
    ) -> AgentToolResult:
        args = as_mapping(prepare_edit_arguments(dict(as_mapping(params))))
        display = get_str(args, "path")
        pairs = _edit_list(args)
        check_not_aborted(signal, "Edit")
        return await asyncio.to_thread(_edit, resolve_tool_path(workspace, display), display, pairs)

    return AgentTool(
        name="edit",
        label="edit",
        description=(
            "Edit a file by replacing exact text. Each edits[].oldText must match exactly once in "
            "the file, including whitespace and indentation; include enough surrounding lines to "
            "make it unique. Use several edits for several changes to the same file."
        ),
        parameters=EDIT_PARAMETERS,
        execute=execute,
        prepare_arguments=prepare_edit_arguments,
    )
