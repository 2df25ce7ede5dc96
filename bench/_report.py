"""The table every benchmark prints: one row per measurement, beside a baseline from the same run.

Same layout as `bench.store`: metric, setting, value, baseline (what it is), baseline value, ratio
(value / baseline value, or the median of per-sample ratios when samples were paired). Absolute
values are only comparable within one run; the ratio is what to compare across machines and runs.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any


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


def render(rows: Sequence[Row], *, setting_header: str = "setting") -> str:
    """The table of `rows`; `setting_header` names the second column."""
    header = ("metric", setting_header, "value", "baseline", "baseline value", "ratio")
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


def quick_main(
    argv: Sequence[str] | None,
    *,
    prog: str,
    doc: str,
    quick_help: str,
    run: Callable[[bool], Coroutine[Any, Any, Sequence[Row]]],
    setting_header: str = "setting",
) -> None:
    """The command line of a benchmark whose only option is ``--quick``: run it, print the table
    and how long the run took. `doc` is the module docstring (its first paragraph is the help)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = asyncio.run(run(args.quick))
    print(render(rows, setting_header=setting_header))
    print(f"\n({time.perf_counter() - started:.1f} s; ratios compare with a baseline from this same run)")


def percentile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` quantile (nearest rank) of `values`; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
