"""The policy interface, the facts a policy may read, and the policy settings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from proxy.peek import Peek


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
    routing_key: str | None = None  # from X-Routing-Key / X-Session-ID
    keys: tuple[int, ...] = ()  # content keys, one per prompt (see routing.keys)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The replicas that may take the request now, and every member of the pool by id."""

    candidates: Sequence[Candidate]  # eligible, with a free slot; never empty
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    replica_id: str
    reason: str


class Policy(Protocol):
    name: str

    def route_keys(self, peek: Peek, model: str | None) -> tuple[int, ...]:
        """Content keys of a request; policies that do not use them return ()."""
        ...

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        """Choose one of ``snapshot.candidates``."""
        ...

    def stats(self) -> dict[str, int]:
        """Sizes of the policy's tracked state, for gauges."""
        ...


class PrefixSettings(BaseModel):
    """Consistent hashing on the conversation prefix with bounded loads (the default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["prefix"] = "prefix"
    load_factor: Annotated[float, Field(ge=1.0)] = 1.25
    load_slack: Annotated[int, Field(ge=0)] = 8
    vnodes: Annotated[int, Field(ge=1, le=4096)] = 160
    sticky_size: Annotated[int, Field(ge=0)] = 65_536
    block_tokens: Annotated[int, Field(ge=1)] = 16
    chunk_bytes: Annotated[int, Field(ge=8)] = 64
    template_threshold: Annotated[int, Field(ge=1)] = 16
    max_tracked: Annotated[int, Field(ge=16)] = 65_536


class LeastLoadedSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["least_loaded"] = "least_loaded"


class RoundRobinSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["round_robin"] = "round_robin"


PolicySettings = Annotated[
    PrefixSettings | LeastLoadedSettings | RoundRobinSettings, Field(discriminator="kind")
]


def build_policy(settings: PrefixSettings | LeastLoadedSettings | RoundRobinSettings) -> Policy:
    from proxy.routing.least_loaded import LeastLoaded
    from proxy.routing.prefix import PrefixPolicy
    from proxy.routing.round_robin import RoundRobin

    if isinstance(settings, PrefixSettings):
        return PrefixPolicy(settings)
    if isinstance(settings, RoundRobinSettings):
        return RoundRobin()
    return LeastLoaded()
