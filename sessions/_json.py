"""JSON text as the store keeps it: compact, non-ASCII kept, always valid UTF-8.

Two encoders write the same text:

- `dumps` for what callers hand the store (entries, inputs, origins, run results): the standard
  library's encoder, which refuses anything that is not plainly JSON (sets, NaN, objects);
- `dumps_event` for session event payloads, at a few thousand a second the one encoding that
  shows in a profile: msgspec's encoder, about ten times faster. Those payloads are JSON values by
  construction (`sessions.event_payloads`), so its leniency (it would also write sets and
  dataclasses, and NaN as `null`) never comes into play.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from sessions.errors import InvalidRequest

__all__ = ["dumps", "dumps_event"]

_encoder = msgspec.json.Encoder()


def dumps(value: Any) -> str:
    """`value` as compact JSON text; raise InvalidRequest for values JSON cannot hold (objects of
    unknown types, sets, NaN, infinities).

    A string holding an unpaired surrogate (a Python str can, e.g. from a provider's JSON) cannot
    be stored as UTF-8; the whole text then falls back to `\\u` escapes rather than the value being
    refused.
    """
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidRequest(f"not storable as JSON: {error}") from error
    return text


def dumps_event(fields: Any) -> str:
    """A session event payload's fields as compact JSON text, the same text `dumps` writes.
    Raise InvalidRequest where `dumps` does (only values no event payload holds)."""
    try:
        return _encoder.encode(fields).decode()
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError):
        return dumps(fields)  # an unpaired surrogate, an integer past 64 bits, ...
