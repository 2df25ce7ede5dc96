"""Time-ordered identifiers: UUID version 7 as canonical text.

The 48 leading bits are the Unix time in milliseconds, so ids sort by creation time both as text
and as UUIDs. The next 12 bits are a counter that restarts at a random value each millisecond and
is incremented for every id made in the same millisecond, so ids made by this process are strictly
increasing even when many are made at once (RFC 9562, "fixed bit-length dedicated counter"). The
remaining 62 bits are random.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid

__all__ = ["new_id", "id_time_ms"]

_COUNTER_BITS = 12
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1
# A new millisecond starts its counter below half the range, leaving at least 2048 ids of room
# before the counter spills into the next millisecond.
_COUNTER_SEED_BITS = _COUNTER_BITS - 1

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def _next_stamp() -> tuple[int, int]:
    global _last_ms, _counter
    now = time.time_ns() // 1_000_000
    with _lock:
        if now > _last_ms:
            _last_ms = now
            _counter = secrets.randbits(_COUNTER_SEED_BITS)
        elif _counter < _COUNTER_MAX:
            # Same millisecond (or the clock stepped back): keep counting on the last stamp.
            _counter += 1
        else:
            _last_ms += 1
            _counter = secrets.randbits(_COUNTER_SEED_BITS)
        return _last_ms, _counter


def new_id() -> str:
    """A new UUIDv7 as lowercase canonical text; later calls in this process sort after earlier ones."""
    ms, counter = _next_stamp()
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= secrets.randbits(62)
    return str(uuid.UUID(int=value))


def id_time_ms(value: str) -> int:
    """The creation time (Unix ms) encoded in a UUIDv7; raise ValueError for anything else."""
    parsed = uuid.UUID(value)
    if parsed.version != 7:
        raise ValueError(f"not a version 7 UUID: {value!r}")
    return parsed.int >> 80
