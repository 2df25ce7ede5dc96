"""The front door: what a connection may do before it has authenticated.

From TCP accept until the gateway sends `hello-ok` (or, for plain HTTP, until a request's head
has arrived), a connection holds a `Pass`:

- a deadline: `handshake_timeout_s` after accept; a connection still unauthenticated then is
  closed (a WebSocket with 1008 "handshake timeout");
- a byte budget: at most `preauth_max_bytes` read from the socket (the upgrade request and every
  frame before `hello-ok`); a connection that sends more is closed with 1009 before the bytes
  reach a parser, so no unauthenticated peer makes the gateway buffer a large frame;
- a place in its address's quota: at most `max_per_address` passes per remote address at once
  (loopback included); a connection over it is closed at accept.

The door is bookkeeping only (no sockets, no timers): the server layer
(`gateway.uvicorn_socket`) asks it for a pass at accept, spends bytes as they arrive, runs the
deadline's timer, and gives the pass back when the connection authenticates or closes. State
lives per address only while that address holds passes; the refusal log is throttled per
address, so a flood of refused connections writes a line per address every `REPORT_EVERY_S`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

log = structlog.get_logger("gateway.door")

REPORT_EVERY_S = 10.0
"""Most one log line per address and this many seconds about refused connections."""
_MAX_REPORTED = 10_000
"""Addresses whose refusal log is throttled at once (older ones are forgotten first)."""


@dataclass(frozen=True, slots=True)
class DoorSettings:
    handshake_timeout_s: float = 10.0
    preauth_max_bytes: int = 256 * 1024
    max_per_address: int = 128

    def __post_init__(self) -> None:
        if self.handshake_timeout_s <= 0 or self.preauth_max_bytes < 1 or self.max_per_address < 1:
            raise ValueError("the door needs positive limits")


class Pass:
    """One connection that has not authenticated yet. `release()` when it authenticates or
    closes (idempotent); until then it counts against its address."""

    __slots__ = ("_door", "address", "deadline", "left", "released")

    def __init__(self, door: Door, address: str, deadline: float, budget: int) -> None:
        self._door = door
        self.address = address
        self.deadline = deadline
        """When the connection must have authenticated (the door's clock)."""
        self.left = budget
        """Bytes it may still send."""
        self.released = False

    def spend(self, size: int) -> bool:
        """Count `size` bytes read from the connection; False when they exceed its budget (the
        caller closes it without parsing them)."""
        self.left -= size
        if self.left >= 0:
            return True
        self._door.over_budget += 1
        log.warning("closing an unauthenticated connection over its byte budget", address=self.address)
        return False

    def remaining_s(self) -> float:
        """Seconds until the deadline (0 when passed)."""
        return max(0.0, self.deadline - self._door.clock())

    def expired(self) -> None:
        """The deadline passed before the connection authenticated (the caller closes it)."""
        self._door.timed_out += 1
        log.info("closing a connection that did not authenticate in time", address=self.address)
        self.release()

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._door.give_back(self.address)


class Door:
    """Passes for unauthenticated connections, per remote address. `clock` is monotonic seconds
    (a seam for tests)."""

    def __init__(self, settings: DoorSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self._pending: dict[str, int] = {}
        self._reported: dict[str, tuple[float, int]] = {}
        self.admitted = 0
        self.refused = 0
        self.timed_out = 0
        self.over_budget = 0

    def admit(self, address: str) -> Pass | None:
        """A pass for a connection just accepted from `address`, or None when that address
        already holds `max_per_address` (the caller closes the connection)."""
        held = self._pending.get(address, 0)
        if held >= self.settings.max_per_address:
            self.refused += 1
            self._report_refusal(address)
            return None
        self._pending[address] = held + 1
        self.admitted += 1
        now = self.clock()
        return Pass(self, address, now + self.settings.handshake_timeout_s, self.settings.preauth_max_bytes)

    def give_back(self, address: str) -> None:
        held = self._pending.get(address, 0) - 1
        if held > 0:
            self._pending[address] = held
        else:
            self._pending.pop(address, None)

    def pending(self, address: str | None = None) -> int:
        """Unauthenticated connections open now (from `address`, or in all)."""
        if address is not None:
            return self._pending.get(address, 0)
        return sum(self._pending.values())

    def snapshot(self) -> dict[str, Any]:
        """Counters for `status` (totals since start, and what is pending now)."""
        return {
            "unauthenticated": self.pending(),
            "addresses": len(self._pending),
            "admitted": self.admitted,
            "refusedOverQuota": self.refused,
            "timedOut": self.timed_out,
            "overByteBudget": self.over_budget,
        }

    def _report_refusal(self, address: str) -> None:
        now = self.clock()
        last, count = self._reported.get(address, (float("-inf"), 0))
        count += 1
        if now - last < REPORT_EVERY_S:
            self._reported[address] = (last, count)
            return
        self._reported.pop(address, None)
        self._reported[address] = (now, 0)
        while len(self._reported) > _MAX_REPORTED:
            del self._reported[next(iter(self._reported))]
        log.warning(
            "refusing connections over the per-address limit of unauthenticated connections",
            address=address,
            limit=self.settings.max_per_address,
            refused=count,
        )
