"""What a person reads off a proxy: figures computed from two scrapes of its ``/metrics``.

Pure functions over prometheus text (parsed with prometheus_client's own parser): request rate
and latency percentiles over the interval between two scrapes (or since the proxy started, from
one), the fleet's prefix-cache hit ratio and the routing quality. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a ``/metrics`` page, by (name, sorted labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples[(sample.name, labels)] = float(sample.value)
    return samples


def total(samples: Samples, name: str, **match: str) -> float:
    """The sum of ``name``'s samples whose labels include ``match``."""
    wanted = set(match.items())
    return sum(v for (n, labels), v in samples.items() if n == name and wanted <= set(labels))


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), value in samples.items():
        if n == name:
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + value
    return out


def _buckets(samples: Samples, name: str, route: str) -> list[tuple[float, float]]:
    found: dict[float, float] = {}
    for (n, labels), value in samples.items():
        if n == name + "_bucket":
            d = dict(labels)
            if d.get("route") == route:
                bound = d["le"]
                le = float("inf") if bound == "+Inf" else float(bound)
                found[le] = found.get(le, 0.0) + value
    return sorted(found.items())


def quantile(buckets: Iterable[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of a cumulative histogram ((upper bound, count) pairs, +Inf last), as
    Prometheus' ``histogram_quantile`` estimates it: the bucket holding the rank ``q x count``,
    linearly within it (from the bucket below's bound, or 0 for the first); a rank in the +Inf
    bucket is the highest finite bound, as much as the buckets can tell. None without
    observations. A bucket's edge alone (every request in the 0.1-0.25 s bucket read as
    p50 = p99 = 250 ms) is no quantile."""
    points = list(buckets)
    if not points or points[-1][1] <= 0:
        return None
    rank = q * points[-1][1]
    below_le, below_count = 0.0, 0.0
    for le, count in points:
        if count >= rank and count > below_count:
            if le == float("inf"):
                return below_le
            return below_le + (le - below_le) * (rank - below_count) / (count - below_count)
        below_le, below_count = le, count
    return below_le


@dataclass(frozen=True)
class Figures:
    seconds: float  # the interval the rates cover
    requests_per_s: float
    p50_s: float | None
    p99_s: float | None
    hit_ratio: float | None  # prefix-cache hits / prompt tokens, fleet, realized
    replica_hit_ratio: dict[str, float] = field(default_factory=dict)


def figures(now: Samples, before: Samples | None, seconds: float) -> Figures:
    """Figures between two scrapes ``seconds`` apart (``before`` None: since the start)."""
    before = before or {}

    def delta(name: str, **match: str) -> float:
        return total(now, name, **match) - total(before, name, **match)

    route = "completions"
    name = "rollout_proxy_request_duration_seconds"
    now_b, before_b = _buckets(now, name, route), dict(_buckets(before, name, route))
    window = [(le, count - before_b.get(le, 0.0)) for le, count in now_b]
    prompt = delta("rollout_proxy_replica_tokens_total", kind="prompt")
    cached = delta("rollout_proxy_replica_tokens_total", kind="cached")
    per_prompt = _delta_by(now, before, "rollout_proxy_replica_tokens_total", "prompt")
    per_cached = _delta_by(now, before, "rollout_proxy_replica_tokens_total", "cached")
    return Figures(
        seconds=seconds,
        requests_per_s=delta("rollout_proxy_requests_total") / seconds if seconds > 0 else 0.0,
        p50_s=quantile(window, 0.5),
        p99_s=quantile(window, 0.99),
        hit_ratio=cached / prompt if prompt > 0 else None,
        replica_hit_ratio={
            rid: per_cached.get(rid, 0.0) / tokens for rid, tokens in per_prompt.items() if tokens
        },
    )


def _delta_by(now: Samples, before: Samples, name: str, kind: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), value in now.items():
        d = dict(labels)
        if n == name and d.get("kind") == kind and "replica" in d:
            out[d["replica"]] = value - before.get((n, labels), 0.0)
    return out
