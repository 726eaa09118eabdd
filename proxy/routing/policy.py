"""The policy interface and the facts a policy may read: candidates, the request, a decision."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from proxy.routing.peek import Peek


class Reported(Protocol):
    """What a replica last reported of its own load (its ``/metrics``), while fresh."""

    @property
    def saturated(self) -> bool:
        """Full: a queue beyond what it runs, or its KV cache nearly used up."""
        ...

    @property
    def foreign(self) -> float:
        """Requests it runs or queues that this proxy did not send it."""
        ...


class Candidate(Protocol):
    """What a policy may know of a replica: its id, its in-flight requests, the estimated work
    they hold (``routing.cost``, the proxy's own view) and what it reported (None when stale)."""

    @property
    def id(self) -> str: ...

    @property
    def inflight(self) -> int: ...

    @property
    def cost(self) -> float: ...

    @property
    def reported(self) -> Reported | None: ...


RouteKeys = tuple[tuple[int, ...], int | None]  # content keys, one per prompt; a hint or None


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class RouteRequest:
    """Routing facts of one request."""

    model: str | None
    routing_key: str | None = None  # from X-Routing-Key / X-Session-ID
    keys: tuple[int, ...] = ()  # content keys, one per prompt (see routing.keys)
    cost: float = 1.0  # estimated work (routing.cost.CostModel.estimate), >= 1
    decode_budget: int = 0  # tokens the request may generate (prompts x n x max_tokens)
    hint: int | None = None  # a finer memory key while no template is confirmed (routing.keys)


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Snapshot:
    """The replicas that may take the request now, and every member of the pool by id."""

    candidates: Sequence[Candidate]  # eligible, with a free slot; never empty
    members: tuple[str, ...]


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Decision:
    replica_id: str
    reason: str


class Policy(Protocol):
    name: str

    def route_keys(self, peek: Peek, model: str | None) -> RouteKeys:
        """Content keys of a request and its hint (``RouteRequest.keys``, ``.hint``); policies
        that do not use them return ((), None)."""
        ...

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        """Choose one of ``snapshot.candidates``."""
        ...

    def stats(self) -> dict[str, int]:
        """Sizes of the policy's tracked state, for gauges."""
        ...
