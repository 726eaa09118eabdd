"""One upstream vLLM server as the proxy sees it, and its id.

Every field has one writer (``tests/unit/test_replica_writers.py`` checks it): the pool
(``fleet.pool.ReplicaPool``) for health, draining, streaks, cool-down, the last error and what
the replica reported (models, server info, adapters: the adapters room's broadcaster tells the
pool what it loaded or dropped); the limiter (``dataplane.limiter``) for ``inflight`` and
``cost``; the circuit breaker (``fleet.breaker``) for ``error_streak``; the load scraper
(``fleet.load``) for ``reported``. Everyone else reads. Ids are
stable, human-readable and come from configuration (the URL's host:port), never from request data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


class Health(enum.Enum):
    PENDING = "pending"  # never probed successfully yet
    HEALTHY = "healthy"
    EJECTED = "ejected"


@dataclass(frozen=True, slots=True)
class ReportedLoad:
    """A replica's own load figures, from its last good ``/metrics`` scrape (``fleet.load``)."""

    running: float
    waiting: float
    kv_usage: float  # 0..1: KV blocks held by running requests (cached free blocks are free)
    preemptions: float  # a counter since the replica started
    foreign: float = 0.0  # requests it runs or queues that this proxy did not send
    saturated: bool = False  # full: a lasting queue, or its KV cache nearly used up


@dataclass(eq=False, slots=True)
class Replica:
    id: str
    url: str
    health: Health = Health.PENDING
    draining: bool = False
    inflight: int = 0
    cost: float = 0.0  # estimated work of the requests in flight (routing.cost)
    reported: ReportedLoad | None = None  # its own /metrics, while fresh
    ok_streak: int = 0
    fail_streak: int = 0
    error_streak: int = 0  # consecutive 5xx answers to generation requests (circuit breaker)
    cooldown_until: float = float("-inf")  # an opened circuit: not readmitted before this
    last_error: str = ""
    base_model: str | None = None
    max_model_len: int | None = None
    adapters: dict[str, str] = field(default_factory=dict)  # lora name -> path
    server_info: dict[str, Any] | None = None
    model_entries: list[dict[str, Any]] = field(default_factory=list)  # raw /v1/models data

    @property
    def routable(self) -> bool:
        return self.health is Health.HEALTHY and not self.draining

    @property
    def state(self) -> str:
        """What status pages show: ``draining`` for a drained replica, else its health."""
        return "draining" if self.draining else self.health.value

    def serves(self, model: str) -> bool:
        """True if ``model`` is this replica's base model or one of its loaded adapters."""
        return model == self.base_model or model in self.adapters


def replica_id(url: str) -> str:
    """``host:port`` of a replica URL (the default port made explicit)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}{parts.path.rstrip('/')}"
