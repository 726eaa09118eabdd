"""Gauges read at scrape time: state the request path never pays for."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health
from proxy.metrics.labels import PREFIX


class StateCollector(Collector):
    """Reads pool, limiter and routing state when Prometheus scrapes."""

    def __init__(
        self,
        pool: ReplicaPool,
        inflight: Callable[[], int],
        queued: Callable[[], int],
        routing: Callable[[], dict[str, int]],
        adapters: Callable[[], dict[str, int]],
    ) -> None:
        self._pool = pool
        self._inflight = inflight
        self._queued = queued
        self._routing = routing
        self._adapters = adapters

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(PREFIX + "inflight", "Requests holding a slot", self._inflight())
        yield GaugeMetricFamily(
            PREFIX + "queue_depth", "Requests waiting for a slot", self._queued()
        )
        loaded = GaugeMetricFamily(
            PREFIX + "replica_adapters", "Adapters loaded on the replica", labels=["replica"]
        )
        for replica in self._pool:
            loaded.add_metric([replica.id], len(replica.adapters))
        yield loaded
        healthy = GaugeMetricFamily(
            PREFIX + "replica_healthy", "1 if the replica takes new requests", labels=["replica"]
        )
        inflight = GaugeMetricFamily(
            PREFIX + "replica_inflight", "Requests in flight on the replica", labels=["replica"]
        )
        for replica in self._pool:
            healthy.add_metric([replica.id], 1.0 if replica.routable else 0.0)
            inflight.add_metric([replica.id], replica.inflight)
        yield healthy
        yield inflight
        up = GaugeMetricFamily(PREFIX + "replicas", "Replicas by health state", labels=["state"])
        for state in Health:
            up.add_metric([state.value], sum(1 for r in self._pool if r.health is state))
        yield up
        tracked = GaugeMetricFamily(
            PREFIX + "routing_state",
            "Entries of the routing policy's bounded state",
            labels=["kind"],
        )
        for kind, size in sorted(self._routing().items()):
            tracked.add_metric([kind], size)
        yield tracked
        versions = GaugeMetricFamily(
            PREFIX + "adapter_versions",
            "Adapter versions: wanted on the fleet, loading, and the newest version number",
            labels=["kind"],
        )
        for kind, value in sorted(self._adapters().items()):
            versions.add_metric([kind], value)
        yield versions
