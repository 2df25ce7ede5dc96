"""Event-loop lag: how much later than asked the daemon's event loop wakes a sleeping task.

Every run, fan-out and request shares one event loop, so the time the loop is busy (or blocked by
something that should not block it) is the delay every client feels. `LagProbe` measures it
cheaply: one task sleeps `interval_s` at a time and records how late it woke (one wake-up per
interval, nothing else). `status` reports it (`eventLoopLagMs`, `eventLoopLag`).

State: the last `window` samples (a bounded deque: one minute at the default interval) for
percentiles, plus cumulative counts per bucket since start, so a reader that polls twice can
compute the distribution of the time in between from the difference of the two histograms.
The probe task belongs to the probe: `start()` it, `aclose()` it (idempotent).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
from collections import deque
from typing import Any

BUCKETS_MS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
"""Upper bounds (inclusive) of the histogram buckets; a last bucket counts everything above."""


class LagProbe:
    def __init__(self, *, interval_s: float = 0.1, window: int = 600) -> None:
        if interval_s <= 0 or window < 1:
            raise ValueError("LagProbe needs a positive interval and window")
        self.interval_s = interval_s
        self._samples: deque[float] = deque(maxlen=window)
        self._buckets = [0] * (len(BUCKETS_MS) + 1)
        self._count = 0
        self._max_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start measuring (on the running loop). Calling it again does nothing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="loop-lag-probe")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def record(self, lag_ms: float) -> None:
        lag_ms = max(0.0, lag_ms)
        self._samples.append(lag_ms)
        self._buckets[bisect.bisect_left(BUCKETS_MS, lag_ms)] += 1
        self._count += 1
        self._max_ms = max(self._max_ms, lag_ms)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.interval_s)
            self.record((loop.time() - asked - self.interval_s) * 1000)

    def snapshot(self) -> dict[str, Any]:
        """Percentiles of the recent window (ms, one decimal), the worst lag since start, and the
        cumulative histogram (`le`: bucket upper bounds in ms, the last one unbounded)."""
        ordered = sorted(self._samples)
        return {
            "intervalMs": round(self.interval_s * 1000, 1),
            "windowS": round(len(ordered) * self.interval_s, 1),
            "lastMs": round(self._samples[-1], 1) if self._samples else 0.0,
            "p50Ms": _percentile(ordered, 0.50),
            "p99Ms": _percentile(ordered, 0.99),
            "maxMs": round(ordered[-1], 1) if ordered else 0.0,
            "maxSinceStartMs": round(self._max_ms, 1),
            "samples": self._count,
            "histogram": {"le": [*BUCKETS_MS, None], "counts": list(self._buckets)},
        }


def _percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values (0 when there are none)."""
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return round(ordered[index], 1)


def histogram_percentile(before: dict[str, Any], after: dict[str, Any], fraction: float) -> float | None:
    """The `fraction` percentile (ms, as a bucket's upper bound) of the samples taken between two
    `snapshot()["histogram"]`s; None when there were none. An unbounded bucket reads as
    infinity."""
    counts = [b - a for a, b in zip(before["counts"], after["counts"], strict=True)]
    total = sum(counts)
    if total <= 0:
        return None
    rank = math.ceil(fraction * total)
    seen = 0
    for bound, count in zip(after["le"], counts, strict=True):
        seen += count
        if seen >= rank:
            return float(bound) if bound is not None else math.inf
    return math.inf
