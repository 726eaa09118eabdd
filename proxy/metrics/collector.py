"""Gauges read at scrape time: state the request path never pays for."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health
from proxy.metrics.labels import PREFIX


def _no_count() -> int:
    return 0


def _no_seconds() -> float:
    return 0.0


@dataclass(frozen=True)
class StateSources:
    """Where the scrape-time gauges read their state (each owner exposes a reader)."""

    inflight: Callable[[], int] = _no_count
    max_inflight: Callable[[], int] = _no_count
    queued: Callable[[], int] = _no_count
    queue_limit: Callable[[], int] = _no_count
    routing: Callable[[], dict[str, int]] = dict
    adapters: Callable[[], dict[str, int]] = dict
    paused_seconds: Callable[[], float] = _no_seconds
    inflight_by_version: Callable[[], dict[str, int]] = dict
    advice: Callable[[], str] = str
    verdicts: tuple[str, ...] = ()
    # The served-policy check: the alarm (0/1), versions each replica was withheld from, and
    # (replica, adapter, digest, state) of each replica's wanted versions.
    policy_alarm: Callable[[], int] = _no_count
    mismatches: Callable[[], dict[str, int]] = dict
    policies: Callable[[], list[tuple[str, str, str, str]]] = list
    # The run's scaler's replica counts by state, as it last reported them (empty: no scaler).
    scaler: Callable[[], dict[str, int]] = dict


class StateCollector(Collector):
    """Reads pool, limiter, routing, adapter and fleet state when Prometheus scrapes."""

    def __init__(self, pool: ReplicaPool, sources: StateSources) -> None:
        self._pool = pool
        self.sources = sources

    def collect(self) -> Iterable[Metric]:
        sources = self.sources
        yield GaugeMetricFamily(PREFIX + "inflight", "Requests holding a slot", sources.inflight())
        yield GaugeMetricFamily(
            PREFIX + "max_inflight", "The overall in-flight cap", sources.max_inflight()
        )
        yield GaugeMetricFamily(
            PREFIX + "queue_depth", "Requests waiting for a slot", sources.queued()
        )
        yield GaugeMetricFamily(
            PREFIX + "queue_limit",
            "How many requests may wait (--queue-size)",
            sources.queue_limit(),
        )
        yield CounterMetricFamily(
            PREFIX + "paused_seconds",
            "Seconds the fleet has stood frozen by TRL's weight syncs (0 unless --forward-pause)",
            sources.paused_seconds(),
        )
        versions = GaugeMetricFamily(
            PREFIX + "inflight_by_version",
            "Requests in flight by the model they ask for (adapter versions the proxy manages, "
            "base, other)",
            labels=["version"],
        )
        for version, count in sorted(sources.inflight_by_version().items()):
            versions.add_metric([version], count)
        yield versions
        advice = GaugeMetricFamily(
            PREFIX + "advice",
            "The bottleneck advisor's verdict now (1 for the current one)",
            labels=["verdict"],
        )
        current = sources.advice()
        for verdict in sources.verdicts:
            advice.add_metric([verdict], 1.0 if verdict == current else 0.0)
        yield advice
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
        cost = GaugeMetricFamily(
            PREFIX + "replica_cost",
            "Estimated work in flight on the replica (decode-token equivalents)",
            labels=["replica"],
        )
        reported = GaugeMetricFamily(
            PREFIX + "replica_reported",
            "What the replica last reported of its load (absent while stale)",
            labels=["replica", "kind"],
        )
        for replica in self._pool:
            healthy.add_metric([replica.id], 1.0 if replica.routable else 0.0)
            inflight.add_metric([replica.id], replica.inflight)
            cost.add_metric([replica.id], replica.cost)
            report = replica.reported
            if report is not None:
                for kind, value in (
                    ("running", report.running),
                    ("waiting", report.waiting),
                    ("kv_usage", report.kv_usage),
                    ("foreign", report.foreign),
                    ("saturated", float(report.saturated)),
                ):
                    reported.add_metric([replica.id, kind], value)
        yield healthy
        yield inflight
        yield cost
        yield reported
        up = GaugeMetricFamily(PREFIX + "replicas", "Replicas by health state", labels=["state"])
        for state in Health:
            up.add_metric([state.value], sum(1 for r in self._pool if r.health is state))
        yield up
        yield GaugeMetricFamily(
            PREFIX + "policy_alarm",
            "1 while some replica does not serve the policy the trainer trained (see "
            "/proxy/status adapters.policy)",
            sources.policy_alarm(),
        )
        mismatches = CounterMetricFamily(
            PREFIX + "policy_mismatch",
            "Versions a replica was withheld from: it did not serve their policy",
            labels=["replica"],
        )
        withheld = sources.mismatches()
        for replica in self._pool:
            mismatches.add_metric([replica.id], withheld.get(replica.id, 0))
        yield mismatches
        policies = GaugeMetricFamily(
            PREFIX + "replica_policy",
            "1 for each wanted adapter version a replica holds: its content digest and the "
            "served-policy check's state (ok, unchecked, probing, withheld, stale)",
            labels=["replica", "adapter", "digest", "state"],
        )
        for labels in sources.policies():
            policies.add_metric(list(labels), 1.0)
        yield policies
        ejections = CounterMetricFamily(
            PREFIX + "ejections", "Replicas ejected, by cause", labels=["cause"]
        )
        for cause, count in self._pool.ejections.items():  # every cause, from the start
            ejections.add_metric([cause], count)
        yield ejections
        tracked = GaugeMetricFamily(
            PREFIX + "routing_state",
            "Entries of the routing policy's bounded state",
            labels=["kind"],
        )
        for kind, size in sorted(sources.routing().items()):
            tracked.add_metric([kind], size)
        yield tracked
        scaler = GaugeMetricFamily(
            PREFIX + "scaler_replicas",
            "The run's replicas as its scaler last reported them: wanted (ready and starting), "
            "ready, starting, draining (absent without a scaler)",
            labels=["state"],
        )
        for counted, count in sources.scaler().items():
            scaler.add_metric([counted], count)
        yield scaler
        versions = GaugeMetricFamily(
            PREFIX + "adapter_versions",
            "Adapter versions: wanted on the fleet, loading, mirroring (seen on the trainer's "
            "disk, not yet in the bucket), and the newest version number",
            labels=["kind"],
        )
        for kind, value in sorted(sources.adapters().items()):
            versions.add_metric([kind], value)
        yield versions
