"""One upstream vLLM server as the proxy sees it, and its id.

What the proxy knows of a replica is kept in records, each with one writer
(``tests/unit/test_replica_writers.py`` checks it):
- ``standing`` (``Standing``: health, draining, probe streaks, cool-down, last error): the pool
  (``fleet.pool.ReplicaPool``: every ejection, admission and drain goes through it);
- ``slots`` (``Slots``: requests in flight and their estimated work): the limiter;
- ``error_streak`` (consecutive 5xx answers) and ``gateway_streak`` (consecutive failed
  connects and dropped connections of requests): outlier detection (``fleet.outliers``);
- ``reported`` (its own ``/metrics`` load figures, replaced whole): the load scraper;
- ``listing`` (its models and server info, replaced whole): ``fleet.info``;
- ``adapters`` (name -> path it loaded from) and ``digests`` (name -> content digest): what of
  its adapters routing may use (held, its policy checked), by its agent (``adapters.held``).
Everyone else reads, through the read-only properties below (routing through its own
``routing.policy.Candidate`` view). Ids are stable, human-readable and come from configuration
(the URL's host:port), never from request data.
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
class Standing:
    """Health and what comes with it (the pool's)."""

    health: Health = Health.PENDING
    draining: bool = False
    ok_streak: int = 0
    fail_streak: int = 0
    cooldown_until: float = float("-inf")  # an opened circuit: not readmitted before this
    last_error: str = ""


@dataclass(eq=False, slots=True)
class Slots:
    """The proxy's own requests on it (the limiter's)."""

    inflight: int = 0
    cost: float = 0.0  # estimated work of the requests in flight (routing.cost)


@dataclass(frozen=True, slots=True)
class Listing:
    """What it lists of itself (``fleet.info``'s): its base model and its server info."""

    base_model: str | None = None
    max_model_len: int | None = None
    entries: tuple[dict[str, Any], ...] = ()  # raw /v1/models data
    server_info: dict[str, Any] | None = None


@dataclass(eq=False, slots=True)
class Replica:
    id: str
    url: str
    standing: Standing = field(default_factory=Standing)
    slots: Slots = field(default_factory=Slots)
    error_streak: int = 0
    gateway_streak: int = 0
    reported: ReportedLoad | None = None  # its own /metrics, while fresh
    listing: Listing = Listing()
    adapters: dict[str, str] = field(default_factory=dict)  # lora name -> path
    digests: dict[str, str] = field(default_factory=dict)  # lora name -> content digest

    @property
    def health(self) -> Health:
        return self.standing.health

    @property
    def draining(self) -> bool:
        return self.standing.draining

    @property
    def last_error(self) -> str:
        return self.standing.last_error

    @property
    def inflight(self) -> int:
        return self.slots.inflight

    @property
    def cost(self) -> float:
        return self.slots.cost

    @property
    def base_model(self) -> str | None:
        return self.listing.base_model

    @property
    def max_model_len(self) -> int | None:
        return self.listing.max_model_len

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self.listing.server_info

    @property
    def routable(self) -> bool:
        standing = self.standing
        return standing.health is Health.HEALTHY and not standing.draining

    @property
    def state(self) -> str:
        """What status pages show: ``draining`` for a drained replica, else its health."""
        return "draining" if self.standing.draining else self.standing.health.value

    def serves(self, model: str) -> bool:
        """True if ``model`` is this replica's base model or one of its loaded adapters."""
        return model == self.listing.base_model or model in self.adapters


def replica_id(url: str) -> str:
    """``host:port`` of a replica URL (the default port made explicit)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}{parts.path.rstrip('/')}"
