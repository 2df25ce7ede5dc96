"""Parsing JSON that is still arriving: tool-call arguments streamed by a model.

`parse_streaming_json` never raises: it returns the best value it can recover from a prefix
(``'{"a": "hel'`` gives ``{"a": "hel"}``) and ``{}`` when nothing can be recovered. Models
sometimes put raw control characters or stray backslashes inside JSON strings; `repair_json`
fixes those before the partial parser is tried.

`IncrementalJson` is what providers use per tool call: it accumulates deltas and re-parses the
buffer, exactly like pi for arguments up to `EXACT_LIMIT` characters; past that it re-parses only
when the buffer has grown by a sixteenth, so a very long argument (a whole file being written)
costs linear rather than quadratic time. `value()` after the last delta is always exact.
"""

from __future__ import annotations

import json
import re
from typing import Any

from partial_json_parser import loads as _partial_loads

EXACT_LIMIT = 8192
"""Buffers up to this many characters are re-parsed on every delta."""

# A string literal, possibly cut off by the end of the text.
_STRING = re.compile(r'"(?:[^"\\]|\\.|\\\Z)*(?:"|\Z)', re.DOTALL)
# Inside a literal: valid escapes (kept), escapes cut off at the end (kept), a lone backslash
# (doubled) and raw control characters (escaped).
_IN_STRING = re.compile(r'\\u[0-9a-fA-F]{4}|\\["\\/bfnrt]|\\u[0-9a-fA-F]{0,3}\Z|\\\Z|\\|[\x00-\x1f]')
_SUSPECT = re.compile(r"[\x00-\x1f\\]")
_CONTROL_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _reject_constant(name: str) -> Any:
    # JSON as JavaScript reads it: NaN and Infinity are not values.
    raise ValueError(f"invalid JSON constant {name}")


def _strict_loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def repair_json(text: str) -> str:
    """Escape raw control characters and double invalid backslashes inside JSON strings.

    Text outside strings (where raw newlines are legal whitespace) is left alone; an already valid
    document comes back unchanged. A string cut off by the end of the text is repaired as far as
    it goes: a trailing lone backslash or a trailing partial ``\\u`` escape is kept for the next
    delta to complete.
    """
    if _SUSPECT.search(text) is None:
        return text
    return _STRING.sub(_repair_string, text)


def _repair_string(match: re.Match[str]) -> str:
    literal = match.group(0)
    if _SUSPECT.search(literal) is None:
        return literal
    return _IN_STRING.sub(_repair_piece, literal)


def _repair_piece(match: re.Match[str]) -> str:
    piece = match.group(0)
    if piece == "\\" and match.end() < len(match.string):
        return "\\\\"
    if piece.startswith("\\"):
        return piece  # a valid escape, or an escape the next delta completes
    return _CONTROL_ESCAPES.get(piece) or f"\\u{ord(piece):04x}"


def _partial(text: str) -> Any:
    try:
        return _partial_loads(text)
    except Exception:  # the partial parser raises several unrelated types on garbage
        return None


def parse_streaming_json(text: str | None) -> Any:
    """Best-effort value of a (possibly incomplete) JSON document; ``{}`` when hopeless.

    Order: strict parse; strict parse of the repaired text; partial parse of the original; partial
    parse of the repaired text; ``{}``.
    """
    if not text or not text.strip():
        return {}
    try:
        return _strict_loads(text)
    except ValueError:
        pass
    repaired = repair_json(text)
    if repaired != text:
        try:
            return _strict_loads(repaired)
        except ValueError:
            pass
    value = _partial(text)
    if value is None and repaired != text:
        value = _partial(repaired)
    return {} if value is None else value


def parse_json_with_repair(text: str) -> Any:
    """Parse a complete JSON document, repairing control characters and backslashes if needed.

    Raises `ValueError` when even the repaired text is not JSON.
    """
    try:
        return _strict_loads(text)
    except ValueError:
        repaired = repair_json(text)
        if repaired == text:
            raise
        return _strict_loads(repaired)


def as_arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments are an object; anything else parsed so far counts as empty."""
    return value if isinstance(value, dict) else {}


class IncrementalJson:
    """The arguments of one streaming tool call: feed deltas, read the value parsed so far.

    State lives as long as the tool call is streaming; the provider drops it at `toolcall_end`.
    """

    __slots__ = ("_buffer", "_parsed_len", "_value")

    def __init__(self) -> None:
        self._buffer: list[str] = []
        self._value: Any = {}
        self._parsed_len = 0

    @property
    def text(self) -> str:
        return "".join(self._buffer)

    def feed(self, delta: str) -> Any:
        """Append `delta` and return the (possibly re-parsed) value."""
        if not delta:
            return self._value
        self._buffer.append(delta)
        text = "".join(self._buffer)
        self._buffer = [text]
        size = len(text)
        if size <= EXACT_LIMIT or size - self._parsed_len >= size // 16:
            self._value = parse_streaming_json(text)
            self._parsed_len = size
        return self._value

    def value(self) -> Any:
        """The exact value of everything fed so far."""
        text = self.text
        if len(text) != self._parsed_len:
            self._value = parse_streaming_json(text)
            self._parsed_len = len(text)
        return self._value
