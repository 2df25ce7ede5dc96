"""Access to the captured real frames in tests/gateway/data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "data"
TOKEN = "testtoken123"


def records(name: str) -> list[dict[str, Any]]:
    """The capture records of a .jsonl file, in order."""
    with (DATA / name).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def example(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def exchanges(name: str) -> list[tuple[Any, Any, Any]]:
    """`(request, error response or None, close or None)` in capture order; a request that is not
    JSON is its text."""
    out: list[tuple[Any, Any, Any]] = []
    for record in records(name):
        frame = record["frame"]
        if record["dir"] == "C->S":
            out.append((frame, None, None))
        elif record["dir"] == "S->C" and out:
            request, _, close = out[-1]
            out[-1] = (request, frame, close)
        elif record["dir"] == "close" and out:
            request, response, _ = out[-1]
            out[-1] = (request, response, frame)
    return out
