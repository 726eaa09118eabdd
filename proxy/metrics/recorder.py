"""The metrics the proxy records (the ``record_*`` API) and renders: one registry per app, fixed
label sets, a few operations per request.

Gauges that describe state (in-flight, queue depth, replica health) are read at scrape time by a
collector (``collector``), so the request path pays nothing for them. The request path's
counters and histograms are lock-free tallies (``tally``), a dict update each; the rarer ones
(rejections, errors, adapter loads) are prometheus_client metrics bound to their label children
once. Label values come from fixed sets (``labels``) or configuration (replica ids), never from
request data.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from proxy.fleet.pool import EJECT_CAUSES, ReplicaPool
from proxy.metrics.collector import StateCollector, StateSources
from proxy.metrics.labels import (
    BACKGROUND_TASKS,
    BAD_INPUT_KINDS,
    CONTROL_ACTIONS,
    LATENCY_BUCKETS,
    OVERHEAD_BUCKETS,
    PREFIX,
    REJECTION_REASONS,
)
from proxy.metrics.push import PushMetrics
from proxy.metrics.tally import Spread, Tally, TallyCollector


class Metrics:
    """Every metric the proxy exports, with ``record_*`` methods for the edge to call."""

    def __init__(self, pool: ReplicaPool, sources: StateSources | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        # The request path's metrics: lock-free, rendered at scrape time (see proxy.metrics.tally).
        self._requests = Tally(
            PREFIX + "requests", "Requests answered, by route and HTTP status", ["route", "status"]
        )
        self._duration = Spread(
            PREFIX + "request_duration_seconds",
            "Time from request to last byte sent",
            ["route"],
            LATENCY_BUCKETS,
        )
        self._ttfb = Spread(
            PREFIX + "upstream_ttfb_seconds",
            "Time from upstream send to response headers",
            ["route"],
            LATENCY_BUCKETS,
        )
        self._overhead = Spread(
            PREFIX + "overhead_seconds",
            "Time spent in the proxy, excluding waiting on upstream",
            ["route"],
            OVERHEAD_BUCKETS,
        )
        self._replica_requests = Tally(
            PREFIX + "replica_requests", "Generation requests sent to each replica", ["replica"]
        )
        self._tokens = Tally(
            PREFIX + "tokens",
            "Prompt tokens reported by replicas (usage), and those served from their prefix caches",
            ["kind"],
        )
        for kind in ("prompt", "cached"):
            self._tokens.add((kind,), 0)
        self._replica_tokens = Tally(
            PREFIX + "replica_tokens",
            "Prompt tokens per replica (usage), and those its prefix cache served",
            ["replica", "kind"],
        )
        self._reuse = Tally(
            PREFIX + "reuse_tokens",
            "Sampled prompts: their tokens, and those whose prefix the fleet had seen before "
            "(the reuse available to routing)",
            ["kind"],
        )
        for kind in ("prompt", "available"):
            self._reuse.add((kind,), 0)
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
        self._load_scrapes = Counter(
            PREFIX + "load_scrapes",
            "Scrapes of the replicas' /metrics load figures, by outcome",
            ["outcome"],
            registry=reg,
        )
        for outcome in ("ok", "failed"):
            self._load_scrapes.labels(outcome)
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
        self._control = Histogram(
            PREFIX + "control_seconds",
            "Fan-out of a state change to every replica (TRL's pause and resume), by action",
            ["action"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=reg,
        )
        for action in CONTROL_ACTIONS:
            self._control.labels(action)
        self._paused_windows = Histogram(
            PREFIX + "sync_paused_seconds",
            "How long the fleet stayed paused per weight sync (from /pause to /resume)",
            buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
            registry=reg,
        )
        self._reconciles = Counter(
            PREFIX + "reconciliations",
            "Replicas brought in step with the adapter window",
            registry=reg,
        )
        self.push = PushMetrics(reg, (replica.id for replica in pool))
        self._state = StateCollector(pool, sources or StateSources())
        reg.register(self._state)
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
                    self._reuse,
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

    def record_control(self, action: str, seconds: float) -> None:
        self._child(self._control, action).observe(seconds)

    def record_paused_window(self, seconds: float) -> None:
        self._paused_windows.observe(seconds)

    def record_reuse(self, prompt_tokens: int, available_tokens: int) -> None:
        self._reuse.add(("prompt",), prompt_tokens)
        self._reuse.add(("available",), available_tokens)

    def record_rejection(self, reason: str) -> None:
        self._child(self._rejections, reason).inc()

    def record_restarts(self, count: int) -> None:
        self._restarts.inc(count)

    def record_bad_input(self, kind: str) -> None:
        self._child(self._bad_input, kind).inc()

    def record_load_scrape(self, outcome: str) -> None:
        self._child(self._load_scrapes, outcome).inc()

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

    def read_state(self, sources: StateSources) -> None:
        """Where the scrape-time gauges read from now on (their owners exist after us)."""
        self._state.sources = sources

    def totals(self) -> dict[str, float]:
        """Cumulative counts the advisor samples: requests, and prompt/cached/reuse tokens."""
        tokens, reuse = self._tokens.values, self._reuse.values
        return {
            "requests": sum(self._requests.values.values()),
            "prompt": tokens.get(("prompt",), 0),
            "cached": tokens.get(("cached",), 0),
            "offered": reuse.get(("prompt",), 0),
            "available": reuse.get(("available",), 0),
        }

    def quality(self) -> dict[str, Any]:
        """Routing quality since start: the realized prefix-cache hit ratio (fleet and per
        replica), the reuse that was available (sampled), and affinity efficiency = realized /
        available (None until there is traffic to say)."""
        tokens, reuse = self._tokens.values, self._reuse.values
        prompt, cached = tokens.get(("prompt",), 0), tokens.get(("cached",), 0)
        offered, available = reuse.get(("prompt",), 0), reuse.get(("available",), 0)
        hit = cached / prompt if prompt else None
        share = available / offered if offered else None
        replicas: dict[str, float] = {}
        for (rid, kind), value in self._replica_tokens.values.items():
            if kind == "prompt" and value:
                replicas[rid] = self._replica_tokens.values.get((rid, "cached"), 0) / value
        return {
            "hit_ratio": hit,
            "available": share,
            "efficiency": hit / share if hit is not None and share else None,
            "replicas": replicas,
        }

    def render(self) -> bytes:
        return generate_latest(self.registry)
