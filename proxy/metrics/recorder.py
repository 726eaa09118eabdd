"""The metrics the proxy records (the ``record_*`` API) and renders: one registry per app, fixed
label sets, a few operations per request.

Gauges that describe state (in-flight, queue depth, replica health) are read at scrape time by a
collector (``collector``), so the request path pays nothing for them. The request path's
counters and histograms are lock-free tallies (``tally``), a dict update each; the rarer ones
(rejections, errors, adapter loads) are prometheus_client metrics whose label children are bound
once (``families.Children``). Every family is a row of ``families.FAMILIES``. Label values come
from fixed sets (``labels``) or configuration (replica ids), never from request data.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)

from proxy import __version__
from proxy.fleet.pool import ReplicaPool
from proxy.metrics.families import FAMILIES, Children, create
from proxy.metrics.tally import Spread, Tally, TallyCollector

# No ``<counter>_created`` / ``<histogram>_created`` series: a timestamp per child, most of an
# idle scrape's lines, that no dashboard of the proxy reads (process start is ``/proxy/status``'s
# ``uptime_s``). prometheus_client's switch is process-wide; it holds before any metric is made.
disable_created_metrics()  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class Rollouts:
    """One run's rollouts answered so far, and the stale ones (``Metrics.rollouts``)."""

    answered: int = 0
    tokens: int = 0  # completion tokens of the answered rollouts
    stale: int = 0
    stale_tokens: int = 0

    @property
    def stale_share(self) -> float | None:
        """The share of the generated tokens that went to stale rollouts."""
        return self.stale_tokens / self.tokens if self.tokens else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "answered": self.answered,
            "tokens": self.tokens,
            "stale": self.stale,
            "stale_tokens": self.stale_tokens,
            "stale_share": self.stale_share,
        }


class Metrics:
    """Every metric the proxy exports, with ``record_*`` methods for the edge to call.

    The families are the rows of ``FAMILIES``; each is created once, at ``_`` + its name (the
    attributes below, whose types tests/unit/test_metrics_families.py holds to the rows' kinds).
    """

    _requests: Tally
    _request_duration_seconds: Spread
    _upstream_ttfb_seconds: Spread
    _overhead_seconds: Spread
    _replica_requests: Tally
    _tokens: Tally
    _replica_tokens: Tally
    _reuse_tokens: Tally
    _routing_decisions: Tally
    _rollouts: Tally
    _rollout_tokens: Tally
    _stale_rollouts: Tally
    _stale_tokens: Tally
    _rejections: Children[Counter]
    _bad_client_requests: Children[Counter]
    _background_errors: Children[Counter]
    _load_scrapes: Children[Counter]
    _replica_errors: Children[Counter]
    _failovers: Counter
    _stream_migrations: Children[Counter]
    _adapter_loads: Children[Counter]
    _adapter_load_attempts: Histogram
    _adapter_load_seconds: Children[Histogram]
    _adapter_fleet_load_seconds: Children[Histogram]
    _restarts: Counter
    _control_seconds: Children[Histogram]
    _sync_paused_seconds: Histogram
    _sync_window_seconds: Histogram
    _reconciliations: Counter
    _probe_seconds: Histogram
    _policy_wait_seconds: Histogram
    _adapter_push_bytes: Children[Counter]
    _adapter_push_seconds: Children[Histogram]
    _adapter_push_fallbacks: Children[Counter]
    _adapter_fleet_sync_seconds: Children[Histogram]
    _adapter_mirror_seconds: Histogram
    _scaler_decisions: Children[Counter]
    _adapter_mirror_failures: Children[Counter]

    def __init__(self, pool: ReplicaPool) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # What is running, as exporters say it: ``rollout_proxy_build_info{version, python} 1``.
        build = Info("rollout_proxy_build", "The proxy's version", registry=self.registry)
        build.info({"version": __version__, "python": platform.python_version()})
        tallies: list[Tally | Spread] = []
        for family in FAMILIES:  # prometheus_client's register as they are made, in this order
            metric = create(family, self.registry)
            setattr(self, "_" + family.name, metric)
            if isinstance(metric, Tally | Spread):
                tallies.append(metric)
        for replica in pool:  # the replicas the pool starts with are exported at 0
            self._adapter_push_bytes.bind((replica.id,))
            self._adapter_push_seconds.bind((replica.id,))
        # The request path's metrics: lock-free, rendered at scrape time (see proxy.metrics.tally).
        self.registry.register(TallyCollector(tallies))

    def record_request(self, route: str, status: int, seconds: float) -> None:
        self._requests.add((route, str(status)))
        self._request_duration_seconds.observe((route,), seconds)

    def record_upstream(self, route: str, replica: str, ttfb_s: float, overhead_s: float) -> None:
        key = (route,)
        self._upstream_ttfb_seconds.observe(key, ttfb_s)
        self._overhead_seconds.observe(key, overhead_s)
        self._replica_requests.add((replica,))

    def record_usage(self, replica: str, prompt_tokens: int, cached_tokens: int) -> None:
        self._tokens.add(("prompt",), prompt_tokens)
        self._tokens.add(("cached",), cached_tokens)
        self._replica_tokens.add((replica, "prompt"), prompt_tokens)
        self._replica_tokens.add((replica, "cached"), cached_tokens)

    def record_rollout(self, run: str, tokens: int, *, stale: bool) -> None:
        """A rollout answered 200 for ``run`` ('' the bare path) with ``tokens`` completion
        tokens; ``stale``: its adapter version had left the window (``adapters.registry``)."""
        key = (run,)
        self._rollouts.add(key)
        self._rollout_tokens.add(key, tokens)
        if stale:
            self._stale_rollouts.add(key)
            self._stale_tokens.add(key, tokens)

    def rollouts(self, run: str) -> Rollouts:
        """``run``'s rollout figures so far (zero for a run with none)."""
        key = (run,)
        return Rollouts(
            int(self._rollouts.values.get(key, 0)),
            int(self._rollout_tokens.values.get(key, 0)),
            int(self._stale_rollouts.values.get(key, 0)),
            int(self._stale_tokens.values.get(key, 0)),
        )

    def runs_changed(self, declared: Iterable[str]) -> None:
        """The declared runs are ``declared`` now: each one's rollout series is exported from
        its declaration (at 0), a removed run's dropped (the label set stays bounded)."""
        names = {"", *declared}
        for tally in (self._rollouts, self._rollout_tokens, self._stale_rollouts,
                      self._stale_tokens):  # fmt: skip
            for key in [k for k in tally.values if k[0] not in names]:
                del tally.values[key]
            for name in names:
                tally.values.setdefault((name,), 0)

    def record_control(self, action: str, seconds: float) -> None:
        self._control_seconds[action,].observe(seconds)

    def record_sync_window(self, seconds: float, *, frozen: bool) -> None:
        """TRL's /pause to its /resume; ``frozen``: the replicas stood still meanwhile."""
        self._sync_window_seconds.observe(seconds)
        if frozen:
            self._sync_paused_seconds.observe(seconds)

    def record_reuse(self, prompt_tokens: int, available_tokens: int) -> None:
        self._reuse_tokens.add(("prompt",), prompt_tokens)
        self._reuse_tokens.add(("available",), available_tokens)

    def record_rejection(self, reason: str) -> None:
        self._rejections[reason,].inc()

    def record_restarts(self, count: int) -> None:
        self._restarts.inc(count)

    def record_bad_input(self, kind: str) -> None:
        self._bad_client_requests[kind,].inc()

    def record_load_scrape(self, outcome: str) -> None:
        self._load_scrapes[outcome,].inc()

    def record_background_error(self, task: str) -> None:
        self._background_errors[task,].inc()

    def record_replica_error(self, replica: str, kind: str) -> None:
        self._replica_errors[replica, kind].inc()

    def record_adapter_load(
        self, replica: str, outcome: str, attempts: int, seconds: float
    ) -> None:
        self._adapter_loads[replica, outcome].inc()
        self._adapter_load_attempts.observe(attempts)
        if outcome == "ok":
            self._adapter_load_seconds[replica,].observe(seconds)

    def record_fleet_load(self, seconds: float, outcome: str) -> None:
        self._adapter_fleet_load_seconds[outcome,].observe(seconds)

    def record_reconcile(self) -> None:
        self._reconciliations.inc()

    def record_probe(self, seconds: float) -> None:
        self._probe_seconds.observe(seconds)

    def record_policy_wait(self, seconds: float) -> None:
        self._policy_wait_seconds.observe(seconds)

    def record_push(self, replica: str, size: int, seconds: float) -> None:
        self._adapter_push_bytes[replica,].inc(size)
        self._adapter_push_seconds[replica,].observe(seconds)

    def record_push_fallback(self, cause: str) -> None:
        self._adapter_push_fallbacks[cause,].inc()

    def record_fleet_sync(self, path: str, seconds: float) -> None:
        """A fleet load's time, by how its replicas got the version (``SYNC_PATHS``)."""
        self._adapter_fleet_sync_seconds[path,].observe(seconds)

    def record_mirror_landed(self, seconds: float) -> None:
        self._adapter_mirror_seconds.observe(seconds)

    def record_mirror_failure(self, cause: str) -> None:
        self._adapter_mirror_failures[cause,].inc()

    def record_scaler_decision(self, action: str) -> None:
        self._scaler_decisions[action,].inc()

    def replica_usage(self) -> dict[str, dict[str, float]]:
        """Each replica's prompt tokens (usage) and those its prefix cache served, so far."""
        usage: dict[str, dict[str, float]] = {}
        for (rid, kind), value in self._replica_tokens.values.items():
            usage.setdefault(rid, {"prompt_tokens": 0.0, "cached_tokens": 0.0})[
                f"{kind}_tokens"
            ] = value
        return usage

    def record_decision(self, reason: str) -> None:
        self._routing_decisions.add((reason,))

    def record_failover(self) -> None:
        self._failovers.inc()

    def record_stream_migration(self, outcome: str) -> None:
        self._stream_migrations[outcome,].inc()

    def totals(self) -> dict[str, float]:
        """Cumulative counts the advisor samples: requests, and prompt/cached/reuse tokens."""
        tokens, reuse = self._tokens.values, self._reuse_tokens.values
        return {
            "requests": sum(self._requests.values.values()),
            "prompt": tokens.get(("prompt",), 0),
            "cached": tokens.get(("cached",), 0),
            "offered": reuse.get(("prompt",), 0),
            "available": reuse.get(("available",), 0),
        }

    def replica_requests(self, replicas: tuple[str, ...]) -> dict[str, float]:
        """Requests answered so far by each of ``replicas`` (the advisor samples it)."""
        counts = self._replica_requests.values
        return {rid: counts.get((rid,), 0) for rid in replicas}

    def decisions(self) -> dict[str, float]:
        """Routing decisions so far, by reason (the advisor samples it)."""
        return {reason: count for (reason,), count in self._routing_decisions.values.items()}

    def quality(self) -> dict[str, Any]:
        """Routing quality since start: the realized prefix-cache hit ratio (fleet and per
        replica), the reuse that was available (sampled), and affinity efficiency = realized /
        available (None until there is traffic to say)."""
        tokens, reuse = self._tokens.values, self._reuse_tokens.values
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
