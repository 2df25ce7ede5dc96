"""A run's trace id, and the log processor that writes it next to the run id.

A run's trace id is its run id when that is a UUID (its 32 hex digits), else the first 128 bits
of the run id's BLAKE2b hash (a client may choose the run id: `chat.send`'s idempotency key). So a
log line of a run and the run's spans can be found from each other without either being kept
anywhere. The processor is part of
the log chain from start-up but adds `trace_id` only while tracing is on (`enable`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import MutableMapping
from typing import Any

_enabled = False


def trace_id_of(run_id: str) -> int:
    """The trace id of a run (128 bits, never 0)."""
    try:
        value = uuid.UUID(run_id).int
    except ValueError:
        value = int.from_bytes(hashlib.blake2b(run_id.encode(), digest_size=16).digest(), "big")
    return value or 1


def enable(on: bool) -> None:
    """Write trace ids into log lines that name a run (`run_id`) from now on, or stop."""
    global _enabled
    _enabled = on


def add_trace_id(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: `trace_id` for a line with a `run_id`, while tracing is on."""
    if _enabled and "trace_id" not in event_dict:
        run_id = event_dict.get("run_id")
        if isinstance(run_id, str) and run_id:
            event_dict["trace_id"] = f"{trace_id_of(run_id):032x}"
    return event_dict
