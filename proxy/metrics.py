"""Prometheus metrics: one registry per app, fixed label sets, a few operations per request.

Gauges that describe state (in-flight, queue depth, replica health) are read at scrape time by a
collector, so the request path pays nothing for them. The request path's counters and histograms
are lock-free tallies (``proxy.tally``), a dict update each; the rarer ones (rejections, errors,
adapter loads) are prometheus_client metrics bound to their label children once. Label values
come from fixed sets (routes, reasons) or configuration (replica ids), never from request data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.fleet.pool import EJECT_CAUSES, ReplicaPool
from proxy.fleet.replica import Health
from proxy.tally import Spread, Tally, TallyCollector

PREFIX = "rollout_proxy_"
# Fixed label sets, exported from the start (at 0) so dashboards and alerts always find them.
REJECTION_REASONS = (
    "queue_full",
    "queue_timeout",
    "too_large",
    "bad_request",
    "unauthorized",
    "unknown_model",
    "upstream_failed",
    "too_many_connections",
    "body_budget",
    "body_timeout",
    "local_resources",
)
BAD_INPUT_KINDS = (
    "too_long",
    "bad_method",
    "bad_request_line",
    "bad_target",
    "bad_header",
    "bad_framing",
    "bad_message",
    "other",
)
BACKGROUND_TASKS = ("health", "discovery", "watcher", "adapters")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
_OVERHEAD_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.5,
)


class _StateCollector(Collector):
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


class Metrics:
    """Every metric the proxy exports, with ``record_*`` methods for the edge to call."""

    def __init__(
        self,
        pool: ReplicaPool,
        inflight: Callable[[], int],
        queued: Callable[[], int],
        routing: Callable[[], dict[str, int]],
        adapters: Callable[[], dict[str, int]],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        # The request path's metrics: lock-free, rendered at scrape time (see proxy.tally).
        self._requests = Tally(
            PREFIX + "requests", "Requests answered, by route and HTTP status", ["route", "status"]
        )
        self._duration = Spread(
            PREFIX + "request_duration_seconds",
            "Time from request to last byte sent",
            ["route"],
            _LATENCY_BUCKETS,
        )
        self._ttfb = Spread(
            PREFIX + "upstream_ttfb_seconds",
            "Time from upstream send to response headers",
            ["route"],
            _LATENCY_BUCKETS,
        )
        self._overhead = Spread(
            PREFIX + "overhead_seconds",
            "Time spent in the proxy, excluding waiting on upstream",
            ["route"],
            _OVERHEAD_BUCKETS,
        )
        self._replica_requests = Tally(
            PREFIX + "replica_requests", "Generation requests sent to each replica", ["replica"]
        )
        self._tokens = Tally(
            PREFIX + "tokens",
            "Prompt tokens reported by replicas (usage), and those served from their prefix caches",
            ["kind"],
        )
        self._replica_tokens = Tally(
            PREFIX + "replica_tokens",
            "Prompt tokens per replica (usage), and those its prefix cache served",
            ["replica", "kind"],
        )
        self._decisions = Tally(
            PREFIX + "routing_decisions", "Routing decisions, by reason", ["reason"]
        )
        self._rejections = Counter(
            PREFIX + "rejections",
            "Requests refused by the proxy, by reason",
            ["reason"],
            registry=reg,
        )
        for reason in REJECTION_REASONS:
            self._rejections.labels(reason)
        self._bad_input = Counter(
            PREFIX + "bad_client_requests",
            "Requests aiohttp could not parse, by kind (logged once per kind per minute)",
            ["kind"],
            registry=reg,
        )
        for kind in BAD_INPUT_KINDS:
            self._bad_input.labels(kind)
        self._background_errors = Counter(
            PREFIX + "background_errors",
            "Exceptions a background task survived (logged), by task",
            ["task"],
            registry=reg,
        )
        for task in BACKGROUND_TASKS:
            self._background_errors.labels(task)
        self._replica_errors = Counter(
            PREFIX + "replica_errors",
            "Upstream failures per replica, by kind",
            ["replica", "kind"],
            registry=reg,
        )
        self._failovers = Counter(
            PREFIX + "failovers",
            "Requests retried on another replica before the first byte",
            registry=reg,
        )
        self._ejections = Counter(
            PREFIX + "ejections", "Replicas ejected, by cause", ["cause"], registry=reg
        )
        for cause in EJECT_CAUSES:  # every cause exported from the start, at 0
            self._ejections.labels(cause)
        self._adapter_loads = Counter(
            PREFIX + "adapter_loads",
            "Adapter loads per replica, by outcome",
            ["replica", "outcome"],
            registry=reg,
        )
        self._adapter_attempts = Histogram(
            PREFIX + "adapter_load_attempts",
            "Attempts per adapter load (mount lag retries)",
            buckets=(1, 2, 3, 5, 10, 20, 50, 100, 500),
            registry=reg,
        )
        self._replica_load = Histogram(
            PREFIX + "adapter_load_seconds",
            "Adapter load time per replica, retries included",
            ["replica"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=reg,
        )
        self._fleet_load = Histogram(
            PREFIX + "adapter_fleet_load_seconds",
            "From a load request to the version loaded on every routable replica",
            ["outcome"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=reg,
        )
        self._restarts = Counter(
            PREFIX + "restarts",
            "Times the supervisor restarted the proxy (--supervise) before this process",
            registry=reg,
        )
        self._reconciles = Counter(
            PREFIX + "reconciliations",
            "Replicas brought in step with the adapter window",
            registry=reg,
        )
        reg.register(_StateCollector(pool, inflight, queued, routing, adapters))
        reg.register(
            TallyCollector(
                [
                    self._requests,
                    self._duration,
                    self._ttfb,
                    self._overhead,
                    self._replica_requests,
                    self._tokens,
                    self._replica_tokens,
                    self._decisions,
                ]
            )
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def record_request(self, route: str, status: int, seconds: float) -> None:
        self._requests.add((route, str(status)))
        self._duration.observe((route,), seconds)

    def record_upstream(self, route: str, replica: str, ttfb_s: float, overhead_s: float) -> None:
        key = (route,)
        self._ttfb.observe(key, ttfb_s)
        self._overhead.observe(key, overhead_s)
        self._replica_requests.add((replica,))

    def record_usage(self, replica: str, prompt_tokens: int, cached_tokens: int) -> None:
        self._tokens.add(("prompt",), prompt_tokens)
        self._tokens.add(("cached",), cached_tokens)
        self._replica_tokens.add((replica, "prompt"), prompt_tokens)
        self._replica_tokens.add((replica, "cached"), cached_tokens)

    def record_rejection(self, reason: str) -> None:
        self._child(self._rejections, reason).inc()

    def record_restarts(self, count: int) -> None:
        self._restarts.inc(count)

    def record_bad_input(self, kind: str) -> None:
        self._child(self._bad_input, kind).inc()

    def record_background_error(self, task: str) -> None:
        self._child(self._background_errors, task).inc()

    def record_replica_error(self, replica: str, kind: str) -> None:
        self._child(self._replica_errors, replica, kind).inc()

    def record_adapter_load(
        self, replica: str, outcome: str, attempts: int, seconds: float
    ) -> None:
        self._child(self._adapter_loads, replica, outcome).inc()
        self._adapter_attempts.observe(attempts)
        if outcome == "ok":
            self._child(self._replica_load, replica).observe(seconds)

    def record_fleet_load(self, seconds: float, outcome: str) -> None:
        self._child(self._fleet_load, outcome).observe(seconds)

    def record_reconcile(self) -> None:
        self._reconciles.inc()

    def record_decision(self, reason: str) -> None:
        self._decisions.add((reason,))

    def record_failover(self) -> None:
        self._failovers.inc()

    def record_ejection(self, cause: str) -> None:
        self._child(self._ejections, cause).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
