"""Lock-free counters and histograms for the request path, exported at scrape time.

prometheus_client's metrics take a lock and walk every bucket on each observation; the request
path runs on one event-loop thread and needs neither. A ``Tally`` is a dict of ints by label
values; a ``Spread`` finds its bucket with one ``bisect`` (C) and bumps one int. Both render as
ordinary Prometheus counters and histograms (cumulative buckets, ``_sum``, ``_count``) through
``TallyCollector``. Not thread-safe by design: touch them from the event loop only.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class Tally:
    """A counter family: ``add(labels, n)`` costs a dict update."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.name, self.documentation, self.labels = name, documentation, tuple(labels)
        self.values: dict[tuple[str, ...], float] = {}

    def add(self, key: tuple[str, ...], amount: float = 1) -> None:
        values = self.values
        values[key] = values.get(key, 0) + amount

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, value in sorted(self.values.items()):
            family.add_metric(list(key), value)
        return family


class Spread:
    """A histogram family with fixed upper bounds (``+Inf`` added)."""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, tuple(labels)
        self.bounds = tuple(bounds)
        self.series: dict[tuple[str, ...], list[float]] = {}  # bucket counts..., sum

    def observe(self, key: tuple[str, ...], value: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = [0.0] * (len(self.bounds) + 2)
        series[bisect.bisect_left(self.bounds, value)] += 1
        series[-1] += value

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, series in sorted(self.series.items()):
            running, buckets = 0.0, []
            for bound, count in zip((*self.bounds, float("inf")), series[:-1], strict=True):
                running += count
                buckets.append((_bound(bound), running))
            family.add_metric(list(key), buckets, series[-1])
        return family


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


class TallyCollector(Collector):
    def __init__(self, metrics: Iterable[Tally | Spread]) -> None:
        self._metrics = tuple(metrics)

    def collect(self) -> Iterable[Metric]:
        for metric in self._metrics:
            yield metric.family()
