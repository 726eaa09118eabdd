"""Replicas and the pool that holds them: membership, health state, draining, in-flight counts.

A replica is *routable* when it is healthy and not draining. In-flight counts are plain integers
changed only on the event loop thread, so reads need no lock. Ids are stable, human-readable and
come from configuration (the URL's host:port), never from request data.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


class Health(enum.Enum):
    PENDING = "pending"  # never probed successfully yet
    HEALTHY = "healthy"
    EJECTED = "ejected"


@dataclass(eq=False, slots=True)
class Replica:
    """One upstream vLLM server, as the proxy sees it."""

    id: str
    url: str
    health: Health = Health.PENDING
    draining: bool = False
    inflight: int = 0
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
    info_at: float = float("-inf")  # clock time of the last models/server_info refresh

    @property
    def routable(self) -> bool:
        return self.health is Health.HEALTHY and not self.draining

    def serves(self, model: str) -> bool:
        """True if ``model`` is this replica's base model or one of its loaded adapters."""
        return model == self.base_model or model in self.adapters


def replica_id(url: str) -> str:
    """``host:port`` of a replica URL (the default port made explicit)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}{parts.path.rstrip('/')}"


class ReplicaPool:
    """The replicas, by id, in the order they were added."""

    def __init__(self, urls: list[str] | None = None) -> None:
        self._replicas: dict[str, Replica] = {}
        self._routable: tuple[Replica, ...] = ()
        self.ids: tuple[str, ...] = ()  # members in pool order; changes only on add/remove
        self.on_change: Callable[[], None] | None = None  # e.g. wake queued requests
        for url in urls or ():
            self.add(url)

    def __iter__(self) -> Iterator[Replica]:
        return iter(tuple(self._replicas.values()))

    def __len__(self) -> int:
        return len(self._replicas)

    def get(self, rid: str) -> Replica | None:
        return self._replicas.get(rid)

    def add(self, url: str) -> Replica:
        rid = replica_id(url)
        if rid in self._replicas:
            raise ValueError(f"replica {rid} is already in the pool")
        replica = Replica(id=rid, url=url.rstrip("/"))
        self._replicas[rid] = replica
        self.refresh()
        return replica

    def remove(self, rid: str) -> Replica:
        replica = self._replicas.pop(rid)
        self.refresh()
        return replica

    def routable(self) -> tuple[Replica, ...]:
        """Healthy, not draining; cached and rebuilt by ``refresh`` on every state change."""
        return self._routable

    def refresh(self) -> None:
        """Recompute the routable set; call after any health or draining change."""
        self._routable = tuple(r for r in self._replicas.values() if r.routable)
        self.ids = tuple(self._replicas)
        if self.on_change is not None:
            self.on_change()

    def set_health(self, replica: Replica, health: Health, error: str = "") -> None:
        replica.health = health
        if error:
            replica.last_error = error
        self.refresh()

    def set_draining(self, replica: Replica, draining: bool) -> None:
        replica.draining = draining
        self.refresh()

    def total_inflight(self) -> int:
        return sum(r.inflight for r in self._replicas.values())
