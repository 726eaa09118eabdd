"""The data plane assembled: the in-flight limiter, the routing policy and the routing facts a
generation request is routed on (``routing.facts``), the forwarder and the control fan-out.
One cost model is shared: the facts estimate with it, the forwarder teaches it."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.config import Settings
from proxy.dataplane.answers import OutOfStep
from proxy.dataplane.fanout import FanOut
from proxy.dataplane.forward import Forwarder, Tracing
from proxy.dataplane.limiter import Limiter
from proxy.fleet.wiring import Fleet
from proxy.metrics.recorder import Metrics
from proxy.routing.cost import CostModel
from proxy.routing.factory import build_policy
from proxy.routing.facts import Facts, Reuse
from proxy.routing.policy import Policy
from proxy.routing.reuse import ReuseEstimator


@dataclass(frozen=True, slots=True)
class DataPlane:
    limiter: Limiter
    policy: Policy
    facts: Facts
    forwarder: Forwarder
    fanout: FanOut


def build_dataplane(
    settings: Settings,
    fleet: Fleet,
    adapters: OutOfStep,
    limiter: Limiter,
    metrics: Metrics,
    tracing: Tracing | None,
) -> DataPlane:
    """``limiter``: made before the pool, which it follows (``ReplicaPool``'s followers)."""
    pool, upstream = fleet.pool, settings.upstream
    policy = build_policy(settings.policy)
    costs = CostModel()
    facts = Facts(
        policy,
        costs,
        settings.client.max_prompt_elements,
        fleet.sync.unknown,
        Reuse(ReuseEstimator(), metrics.record_reuse),
    )
    forwarder = Forwarder(
        pool,
        fleet.client.pool,
        limiter,
        policy,
        metrics,
        fleet.outliers,
        adapters,
        max_attempts=upstream.max_attempts,
        max_stream_migrations=upstream.max_stream_migrations,
        request_timeout_s=upstream.request_timeout_s,
        tracing=tracing,
        costs=costs,
    )
    fanout = FanOut(pool, fleet.client, fleet.sync, metrics)
    return DataPlane(limiter, policy, facts, forwarder, fanout)
