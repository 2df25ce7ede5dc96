"""A token bucket: `rate_per_s` requests per second on average, `burst` at once.

State is two numbers per bucket, kept for the life of the process (one bucket per webhook; a
restart refills them). `clock` is monotonic seconds, a seam for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def take(self) -> float | None:
        """Take a token: None when one was there, else the seconds until one will be."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate_per_s)
        self._stamp = now
        if self._tokens >= 1:
            self._tokens -= 1
            return None
        return (1 - self._tokens) / self.rate_per_s
