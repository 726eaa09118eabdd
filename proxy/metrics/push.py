"""Adapter push metrics: bytes and seconds per replica push, fallbacks to the mount path by
cause, and how long a fleet sync took by the path its replicas loaded from.

Every fixed label set is exported from the start, at 0; replica children are created for the
replicas the pool starts with and for any other on its first push.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from proxy.metrics.labels import PREFIX

# Why a replica loaded from the mount instead of a pushed copy (proxy.adapters.push).
PUSH_FALLBACK_CAUSES = ("no_receiver", "refused", "unreachable", "unreadable")
# How the replicas of one fleet sync got the version: all pushed, all from the mount, or both.
SYNC_PATHS = ("push", "mount", "mixed")
_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class PushMetrics:
    def __init__(self, registry: CollectorRegistry, replicas: Iterable[str] = ()) -> None:
        self._bytes = Counter(
            PREFIX + "adapter_push_bytes",
            "Adapter bytes pushed into each replica's receiver (completed pushes)",
            ["replica"],
            registry=registry,
        )
        self._seconds = Histogram(
            PREFIX + "adapter_push_seconds",
            "Time of one completed push to one replica (upload, checks, publish)",
            ["replica"],
            buckets=_SECONDS,
            registry=registry,
        )
        self._fallbacks = Counter(
            PREFIX + "adapter_push_fallbacks",
            "Replica loads that fell back to the bucket mount, by cause",
            ["cause"],
            registry=registry,
        )
        self._sync = Histogram(
            PREFIX + "adapter_fleet_sync_seconds",
            "From a load request to the version on every routable replica, by how they got it",
            ["path"],
            buckets=_SECONDS,
            registry=registry,
        )
        for cause in PUSH_FALLBACK_CAUSES:
            self._fallbacks.labels(cause)
        for path in SYNC_PATHS:
            self._sync.labels(path)
        for replica in replicas:
            self._bytes.labels(replica)
            self._seconds.labels(replica)

    def record_push(self, replica: str, size: int, seconds: float) -> None:
        self._bytes.labels(replica).inc(size)
        self._seconds.labels(replica).observe(seconds)

    def record_fallback(self, cause: str) -> None:
        self._fallbacks.labels(cause).inc()

    def record_sync(self, path: str, seconds: float) -> None:
        self._sync.labels(path).observe(seconds)
