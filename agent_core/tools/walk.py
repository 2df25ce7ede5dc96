"""Directory walking and glob matching for `grep` and `find`.

The walk is depth-first in name order (so results are stable), never follows symlinks (a link
is reported as an entry but not entered or read through), skips version-control directories,
and checks the abort signal as it goes. Globs use the familiar shell syntax: ``*`` and ``?``
within a path component, ``**`` across components, ``[...]`` classes and ``{a,b}`` choices. A
pattern without a ``/`` matches a file's name; one with a ``/`` matches its path relative to the
search root.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import msgspec

from agent_core.abort import AbortSignal
from agent_core.errors import ToolError

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})

EntryKind = Literal["dir", "file", "symlink", "other"]


class Entry(msgspec.Struct, frozen=True):
    relative: str
    """Path from the walk's root with ``/`` separators."""
    path: Path
    kind: EntryKind


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    try:
        if entry.is_symlink():
            return "symlink"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def _sorted_entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as scan:
            return sorted(scan, key=lambda entry: entry.name)
    except OSError:
        return []  # unreadable directories are skipped, like a permission-denied subtree


def walk_tree(root: Path, signal: AbortSignal | None = None) -> Iterator[Entry]:
    """Every entry under `root` (not `root` itself), parents before their children."""
    stack: list[tuple[str, Iterator[os.DirEntry[str]]]] = [("", iter(_sorted_entries(root)))]
    while stack:
        prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if signal is not None and signal.aborted:
            raise ToolError("Search aborted")
        relative = prefix + entry.name
        kind = _kind(entry)
        if kind == "dir" and entry.name in SKIPPED_DIRS:
            continue
        yield Entry(relative, Path(entry.path), kind)
        if kind == "dir":
            stack.append((relative + "/", iter(_sorted_entries(Path(entry.path)))))


def _closing_bracket(pattern: str, start: int) -> int:
    index = start + 1
    if index < len(pattern) and pattern[index] in "!^":
        index += 1
    if index < len(pattern) and pattern[index] == "]":
        index += 1
    return pattern.find("]", index)


def _split_braces(body: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for char in body:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        current += char
    parts.append(current)
    return parts


def _matching_brace(pattern: str, start: int) -> int:
    depth = 0
    for index in range(start, len(pattern)):
        if pattern[index] == "{":
            depth += 1
        elif pattern[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _glob_items(pattern: str) -> list[tuple[str, str]]:
    """The pattern as ("star" | "globstar" | "fixed" | "varying", regex) items."""
    items: list[tuple[str, str]] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "*":
            run = len(pattern) - index - len(pattern[index:].lstrip("*"))
            index += run
            if run == 1:
                items.append(("star", "[^/]*"))
            elif pattern.startswith("/", index):
                items.append(("globstar", "(?:.*/)?"))
                index += 1
            else:
                items.append(("globstar", ".*"))
            continue
        if char == "?":
            items.append(("fixed", "[^/]"))
        elif char == "[" and (close := _closing_bracket(pattern, index)) > 0:
            body = pattern[index + 1 : close]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            items.append(("fixed", "[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]"))
            index = close
        elif char == "{" and (close := _matching_brace(pattern, index)) > 0:
            choices = _split_braces(pattern[index + 1 : close])
            items.append(("varying", "(?:" + "|".join(glob_to_regex(choice) for choice in choices) + ")"))
            index = close
        else:
            items.append(("fixed", re.escape(char)))
        index += 1
    return items


def glob_to_regex(pattern: str) -> str:
    """Regular expression source equivalent to the glob `pattern` (whole-string match).

    A ``*`` followed by a fixed-length chunk and then another ``*`` becomes an atomic lazy group:
    the leftmost match of such a chunk is always the right one, so the regex cannot backtrack
    exponentially on patterns like ``*a*a*a*b`` (the technique `fnmatch` uses).
    """
    items = _glob_items(pattern)
    out: list[str] = []
    index = 0
    while index < len(items):
        kind, regex = items[index]
        index += 1
        if kind != "star":
            out.append(regex)
            continue
        chunk: list[str] = []
        while index < len(items) and items[index][0] == "fixed":
            chunk.append(items[index][1])
            index += 1
        if chunk and index < len(items) and items[index][0] == "star":
            out.append("(?>[^/]*?" + "".join(chunk) + ")")
        else:
            out.append("[^/]*" + "".join(chunk))
    return "".join(out)


def compile_glob(pattern: str) -> Callable[[str], bool]:
    """A predicate over root-relative ``/``-separated paths; raises `ToolError` on a bad glob."""
    text = pattern.strip()
    while text.startswith("./"):
        text = text[2:]
    try:
        regex = re.compile(glob_to_regex(text), re.DOTALL)
    except re.error as exc:
        raise ToolError(f"Invalid glob pattern {pattern!r}: {exc}") from None
    if "/" in text:
        return lambda relative: regex.fullmatch(relative) is not None
    return lambda relative: regex.fullmatch(relative.rsplit("/", 1)[-1]) is not None
