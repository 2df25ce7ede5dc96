"""The table every benchmark prints: one row per measurement, beside a baseline from the same run.

Same layout as `bench.store`: metric, setting, value, baseline (what it is), baseline value, ratio
(value / baseline value, or the median of per-sample ratios when samples were paired). Absolute
values are only comparable within one run; the ratio is what to compare across machines and runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    metric: str
    setting: str
    value: float
    unit: str
    baseline: str
    baseline_value: float
    paired_ratio: float | None = None
    """When set, the ratio to print: the median of value/baseline over samples taken side by side,
    steadier on a noisy machine than the ratio of the two medians."""

    @property
    def ratio(self) -> float:
        if self.paired_ratio is not None:
            return self.paired_ratio
        if not self.baseline_value or math.isnan(self.value) or math.isnan(self.baseline_value):
            return float("nan")
        return self.value / self.baseline_value


def _format(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "/s":
        return f"{value:,.0f} {unit}"
    if unit in ("", "events"):
        return f"{value:,.0f}" + (f" {unit}" if unit else "")
    if unit == "MiB":
        return f"{value:,.1f} {unit}"
    return f"{value:,.2f} {unit}"


def render(rows: Sequence[Row]) -> str:
    header = ("metric", "setting", "value", "baseline", "baseline value", "ratio")
    table = [header] + [
        (
            r.metric,
            r.setting,
            _format(r.value, r.unit),
            r.baseline,
            _format(r.baseline_value, r.unit),
            "-" if math.isnan(r.ratio) else f"{r.ratio:.2f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = []
    for n, line in enumerate(table):
        cells = [
            cell.rjust(w) if i in (2, 4, 5) else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` quantile (nearest rank) of `values`; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
