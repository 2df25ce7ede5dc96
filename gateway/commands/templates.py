"""Prompt templates: Markdown files that a `/name args` message expands into a prompt.

A template is a `<name>.md` file in a prompts directory; `name` (the file name without `.md`) is
what follows the slash. Its optional front matter gives a `description` (else the first line of
the body, shortened); the body is the prompt. In the body:

- `$1`, `$2`, ... are the arguments by position (nothing when there are fewer);
- `$@` and `$ARGUMENTS` are all arguments, joined by spaces;
- `${@:N}` is the arguments from the N-th on, `${@:N:L}` at most L of them from the N-th.

Arguments are split at spaces and tabs; single or double quotes keep spaces inside one argument.
Substitution is one pass over the body: an argument that itself contains `$1` stays as it is.
The first directory that has a template of a name wins (`scan_templates`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import msgspec

from gateway.commands.front_matter import split_front_matter

__all__ = [
    "MAX_TEMPLATE_BYTES",
    "PromptTemplate",
    "TemplateError",
    "expand_template",
    "load_template",
    "scan_templates",
    "split_arguments",
]

MAX_TEMPLATE_BYTES = 256 * 1024
DESCRIPTION_CHARS = 80

_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")
_PLACEHOLDER = re.compile(r"\$\{@:(\d+)(?::(\d+))?\}|\$(\d+)|\$@|\$ARGUMENTS")


class TemplateError(Exception):
    """A template file that cannot be used; the message names the file and the problem."""


class PromptTemplate(msgspec.Struct, frozen=True):
    name: str
    description: str
    body: str
    path: Path

    def expand(self, arguments: str) -> str:
        """The prompt for `/name arguments`."""
        return expand_template(self.body, split_arguments(arguments))


def load_template(path: Path) -> PromptTemplate:
    """The template in `path`. Raises TemplateError (unreadable, too large, empty)."""
    try:
        size = path.stat().st_size
        if size > MAX_TEMPLATE_BYTES:
            raise TemplateError(
                f"{path}: {size} bytes, more than the {MAX_TEMPLATE_BYTES} a template may have"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise TemplateError(f"{path}: not UTF-8 text") from None
    matter = split_front_matter(text)
    if not matter.body.strip():
        raise TemplateError(f"{path}: the template is empty")
    description = " ".join((matter.get("description") or "").split())
    if not description:
        first = next(line.strip() for line in matter.body.splitlines() if line.strip())
        description = first if len(first) <= DESCRIPTION_CHARS else first[: DESCRIPTION_CHARS - 1] + "…"
    return PromptTemplate(name=path.stem, description=description, body=matter.body, path=path.absolute())


def template_files(directory: Path) -> list[Path]:
    """The `*.md` files directly in `directory` whose names can follow a slash, by name."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for entry in entries:
        if not entry.name.endswith(".md") or entry.name.startswith("."):
            continue
        path = Path(entry.path)
        if _NAME.match(path.stem) and path.is_file():
            out.append(path)
    return out


def scan_templates(directories: Sequence[Path]) -> tuple[list[PromptTemplate], list[str]]:
    """Every template of `directories` (the first of a name wins) and the problems of the files
    that could not be used, one line each."""
    found: dict[str, PromptTemplate] = {}
    problems: list[str] = []
    for directory in directories:
        for path in template_files(directory):
            if path.stem in found:
                continue
            try:
                found[path.stem] = load_template(path)
            except TemplateError as exc:
                problems.append(str(exc))
    return list(found.values()), problems


def split_arguments(text: str) -> list[str]:
    """`text` split at spaces and tabs; a quoted part ('...' or "...") keeps its spaces."""
    args: list[str] = []
    current: list[str] = []
    quote: str | None = None
    started = False
    for char in text:
        if quote is not None:
            if char == quote:
                quote = None
            else:
                current.append(char)
        elif char in ("'", '"'):
            quote = char
            started = True
        elif char in (" ", "\t", "\n"):
            if started or current:
                args.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
    if started or current:
        args.append("".join(current))
    return args


def expand_template(body: str, args: Sequence[str]) -> str:
    """`body` with its placeholders replaced by `args` (see the module docstring)."""

    def substitute(match: re.Match[str]) -> str:
        start, length, position = match.group(1), match.group(2), match.group(3)
        if position is not None:
            index = int(position) - 1
            return args[index] if 0 <= index < len(args) else ""
        if start is not None:
            first = max(int(start), 1) - 1
            chosen = args[first:] if length is None else args[first : first + int(length)]
            return " ".join(chosen)
        return " ".join(args)

    return _PLACEHOLDER.sub(substitute, body)
