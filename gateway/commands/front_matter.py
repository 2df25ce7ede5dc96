"""The front matter of a Markdown file: the `---` block at its top that skills and prompt
templates use for `name`, `description` and a few flags.

Only the part of YAML such files use is read: `key: value` lines at the top level, values plain
or quoted ('...' or "..."), and block values (`key: |` or `key: >` followed by indented lines).
Nested tables and lists (`metadata:` with indented entries) are skipped. A file without a
closing `---` has no front matter; its whole text is the body.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["FrontMatter", "split_front_matter"]

_KEY = re.compile(r"^(?P<key>[A-Za-z_][\w-]*)\s*:(?:\s+(?P<value>.*))?$")


class FrontMatter(msgspec.Struct, frozen=True):
    """The fields of a file's front matter (keys as written) and the text after it."""

    fields: dict[str, str]
    body: str

    def get(self, key: str) -> str | None:
        value = self.fields.get(key)
        return value if value else None

    def flag(self, key: str) -> bool:
        """A `true`/`yes`/`on` value (any case); anything else is false."""
        return (self.fields.get(key) or "").strip().lower() in ("true", "yes", "on")


def split_front_matter(text: str) -> FrontMatter:
    """The front matter of `text` and its body (the text after the closing `---`, stripped of
    surrounding blank lines)."""
    text = text.lstrip("\ufeff")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return FrontMatter({}, text.strip("\n"))
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        return FrontMatter({}, text.strip("\n"))
    body = "\n".join(lines[end + 1 :]).strip("\n")
    return FrontMatter(_fields(lines[1:end]), body)


def _fields(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    index = 0
    while index < len(lines):
        match = _KEY.match(lines[index])
        index += 1
        if match is None:
            continue  # an indented line of a nested value, a comment, a blank line
        key, value = match["key"], (match["value"] or "").strip()
        if value[:1] in ("|", ">"):
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip() or lines[index][:1] in (" ", "\t")):
                block.append(lines[index].strip())
                index += 1
            fields[key] = _block(block, folded=value.startswith(">"))
        else:
            fields[key] = _scalar(value)
    return fields


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in ("'", '"'):
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    if " #" in value:  # a trailing comment
        value = value.split(" #", 1)[0].rstrip()
    return value


def _block(lines: list[str], *, folded: bool) -> str:
    while lines and not lines[-1]:
        lines.pop()
    if not folded:
        return "\n".join(lines)
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n".join(paragraphs)
