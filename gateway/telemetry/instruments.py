"""Counters and histograms kept as plain numbers, turned into Prometheus families on scrape.

Observing costs a dictionary update: nothing of `prometheus_client` is imported until the first
scrape (`gateway.telemetry.exposition`), so a daemon nobody scrapes never loads it. Every label
value passes through a `LabelCap` when it can come from outside the configuration (model ids,
tool names): the number of series of a family is bounded, and values past the bound are counted
under `other`. The numbers live as long as the daemon; they are never reset.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

import msgspec

OTHER = "other"
"""The label value of everything past a cap."""

Labels = tuple[str, ...]

SECONDS_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    1800,
)
"""Durations from a journal commit (milliseconds) to a long run (half an hour and more)."""
SIZE_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
"""Counts of items (a journal commit's batch)."""


class LabelCap:
    """At most `limit` distinct values of one label; later new values become `other`."""

    def __init__(self, limit: int, *, fixed: Sequence[str] = ()) -> None:
        self._limit = limit
        self._seen: set[str] = set(fixed)
        self._fixed = len(self._seen)

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) - self._fixed >= self._limit:
            return OTHER
        self._seen.add(value)
        return value


class Family(msgspec.Struct, frozen=True):
    name: str
    """Without the `_total` a counter's samples carry."""
    help: str
    labels: Labels


class Counter:
    """A monotonically increasing number per label set."""

    def __init__(self, name: str, help: str, labels: Labels = ()) -> None:
        self.family = Family(name, help, labels)
        self.values: dict[Labels, float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)


class HistogramSeries(msgspec.Struct):
    counts: list[int]
    """Per bucket, observations that fell in it (not cumulative; the last is +Inf)."""
    total: float = 0.0
    count: int = 0

    def cumulative(self, bounds: Sequence[float]) -> Iterator[tuple[str, int]]:
        running = 0
        for bound, n in zip((*(_bound_text(b) for b in bounds), "+Inf"), self.counts, strict=True):
            running += n
            yield bound, running


class Histogram:
    """Observations counted into fixed buckets, per label set."""

    def __init__(
        self, name: str, help: str, labels: Labels = (), *, buckets: tuple[float, ...] = SECONDS_BUCKETS
    ) -> None:
        self.family = Family(name, help, labels)
        self.buckets = buckets
        self.series: dict[Labels, HistogramSeries] = {}

    def observe(self, value: float, *labels: str) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = HistogramSeries(counts=[0] * (len(self.buckets) + 1))
        series.counts[bisect.bisect_left(self.buckets, value)] += 1
        series.total += value
        series.count += 1


def _bound_text(bound: float) -> str:
    return repr(float(bound))
