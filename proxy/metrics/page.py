"""The ``/metrics`` page: what the recorder counted (``recorder.Metrics``), then what is read
when Prometheus scrapes (``collector.StateCollector``, ``runs.RunCollector``), whose sources
exist only once every room is built; each part is made with its sources, none is attached later.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector


class MetricsPage(CollectorRegistry):
    """The parts, in order, as one registry to ``generate_latest``."""

    def __init__(self, *parts: Collector) -> None:
        super().__init__(auto_describe=False)
        self._parts = parts

    def collect(self) -> Iterable[Metric]:
        for part in self._parts:
            yield from part.collect()

    def render(self) -> bytes:
        return generate_latest(self)
