"""Adapter mirror metrics (``proxy.adapters.mirror``): how long a version took from first seen
on the trainer's disk to landed in the bucket, and the mirror's failures by cause.

The causes are exported from the start, at 0; the ``mirroring`` backlog is a scrape-time gauge
(``adapter_versions{kind="mirroring"}``, ``collector``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from proxy.metrics.labels import PREFIX

# What went wrong (proxy.adapters.mirror.FAILURE_CAUSES): a snapshot not taken, one copy
# attempt failed (retried), a version given up after its attempts, the backlog past its bound
# (nothing dropped), a bucket copy not pruned, the local directory not listed (nothing pruned).
MIRROR_FAILURE_CAUSES = ("snapshot", "copy", "gave_up", "backlog", "prune", "listing")
MIRROR_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class MirrorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._seconds = Histogram(
            PREFIX + "adapter_mirror_seconds",
            "From a version first seen on the trainer's disk to its copy landed in the bucket",
            buckets=MIRROR_BUCKETS,
            registry=registry,
        )
        self._failures = Counter(
            PREFIX + "adapter_mirror_failures",
            "Adapter mirror failures, by cause (a copy attempt is retried; nothing is dropped)",
            ["cause"],
            registry=registry,
        )
        for cause in MIRROR_FAILURE_CAUSES:
            self._failures.labels(cause)

    def record_landed(self, seconds: float) -> None:
        self._seconds.observe(seconds)

    def record_failure(self, cause: str) -> None:
        self._failures.labels(cause).inc()
