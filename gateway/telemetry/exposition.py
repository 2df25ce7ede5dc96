"""The Prometheus text format of the daemon's metrics, rendered by `prometheus_client`.

Imported on the first scrape only. The registry holds one collector that turns the plain numbers
of `Metrics` and the scrape-time `Reading`s into metric families each time it is collected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.telemetry.metrics import Metrics
from gateway.telemetry.readings import Reading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _GatewayCollector(Collector):
    def __init__(self, metrics: Metrics, readings: Callable[[], Sequence[Reading]]) -> None:
        self._metrics = metrics
        self._readings = readings

    def collect(self) -> Iterator[Metric]:
        for counter in self._metrics.counters():
            family = counter.family
            counted = CounterMetricFamily(family.name, family.help, labels=family.labels)
            for labels, value in sorted(counter.values.items()):
                counted.add_metric(labels, value)
            yield counted
        for histogram in self._metrics.histograms():
            family = histogram.family
            out = HistogramMetricFamily(family.name, family.help, labels=family.labels)
            for labels, series in sorted(histogram.series.items()):
                out.add_metric(labels, list(series.cumulative(histogram.buckets)), series.total)
            yield out
        for reading in self._readings():
            family = reading.family
            read: CounterMetricFamily | GaugeMetricFamily
            if reading.kind == "counter":
                read = CounterMetricFamily(family.name, family.help, labels=family.labels)
            else:
                read = GaugeMetricFamily(family.name, family.help, labels=family.labels)
            for labels, value in reading.read():
                read.add_metric(labels, value)
            yield read


class Exposition:
    """Renders the metrics; `render()` collects them afresh each time."""

    def __init__(self, metrics: Metrics, readings: Callable[[], Sequence[Reading]]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_GatewayCollector(metrics, readings))

    def render(self) -> bytes:
        return generate_latest(self._registry)
