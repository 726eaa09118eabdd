"""The policy interface and the request facts a policy may read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Candidate(Protocol):
    """What a policy may know of a replica: its id and its current in-flight count."""

    @property
    def id(self) -> str: ...

    @property
    def inflight(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """Routing facts of one request."""

    model: str | None
    routing_key: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    replica_id: str
    reason: str


class Policy(Protocol):
    name: str

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Decision | None:
        """Choose one of ``candidates`` (never empty), or None to wait for capacity."""
        ...


def build_policy(kind: str) -> Policy:
    from proxy.routing.least_loaded import LeastLoaded

    if kind == "least_loaded":
        return LeastLoaded()
    raise ValueError(f"unknown routing policy {kind!r}")
