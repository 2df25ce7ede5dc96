"""Webhook templates: a delivery's JSON body rendered into the message an agent reads.

A template is text with `{{ path }}` placeholders. A path walks the body: `{{ repository.name }}`
is the body's `repository` object's `name`, `{{ commits.0.id }}` the first commit's id, and
`{{ body }}` the whole body as indented JSON. A string is inserted as it is, anything else as
compact JSON; a path that leads nowhere inserts nothing. Nothing else is interpreted: no
expressions, no filters, no code, so a body can never make the template do more than insert
text. What the sender controls is still text the agent reads; write the template to say so.

Each inserted value is cut at `MAX_VALUE_CHARS` and the message at `MAX_MESSAGE_CHARS` (with a
note saying so). `check` refuses a template whose braces do not pair, when the configuration is
loaded rather than when the first delivery comes.

`render_key` fills a session-key template the same way, keeping from each value only what a key
may hold (lower-case letters, digits, `.`, `_`, `-`; at most 64 of them), the key cut at
`MAX_KEY_CHARS`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_MESSAGE_CHARS", "MAX_VALUE_CHARS", "check", "render", "render_key"]

MAX_VALUE_CHARS: Final = 4000
MAX_MESSAGE_CHARS: Final = 32_000
_PLACEHOLDER: Final = re.compile(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")
_KEY_UNSAFE: Final = re.compile(r"[^a-z0-9._-]+")
_MAX_KEY_PART: Final = 64
MAX_KEY_CHARS: Final = 500
"""The longest session key the database keeps."""


def check(template: str) -> None:
    """Raise ValueError, saying what is wrong, for a template that is empty or whose `{{`/`}}`
    do not form placeholders."""
    if not template.strip():
        raise ValueError("the template is empty")
    rest = _PLACEHOLDER.sub("", template)
    if "{{" in rest or "}}" in rest:
        bad = rest[rest.find("{{") :] if "{{" in rest else rest[: rest.find("}}") + 2]
        raise ValueError(
            f"not a placeholder: {bad[:40]!r} (write {{{{ path.to.field }}}} with letters, digits, _ . -)"
        )


def render(template: str, body: Any) -> str:
    """The message for `body`."""

    def value(match: re.Match[str]) -> str:
        return _text(_lookup(body, match.group(1)), indent=match.group(1) == "body")[:MAX_VALUE_CHARS]

    message = _PLACEHOLDER.sub(value, template)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "\n\n[the message was cut: the delivery was longer]"
    return message


def render_key(template: str, body: Any) -> str:
    """A session key from a key template (see the module docstring)."""

    def value(match: re.Match[str]) -> str:
        text = _KEY_UNSAFE.sub("-", _text(_lookup(body, match.group(1)), indent=False).lower()).strip("-")
        return text[:_MAX_KEY_PART] or "none"

    return _PLACEHOLDER.sub(value, template)[:MAX_KEY_CHARS]


def _lookup(body: Any, path: str) -> Any:
    if path == "body":
        return body
    node = body
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _text(value: Any, *, indent: bool) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(
        value, indent=2 if indent else None, ensure_ascii=False, separators=None if indent else (",", ":")
    )
