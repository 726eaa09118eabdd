"""Suite ``routing``: cache hit rate and balance of each policy on GRPO traces.

For each fleet size, the same trace (groups of 8, 3 turns, a shared template, 64 rollouts in
flight per replica, finite per-replica caches) goes through each policy in ``routing_sim``;
reported against the best possible for the trace. A membership case has a replica leave half-way
and another join later.
"""

from __future__ import annotations

from typing import Any

from benchmarks.learned_blocks import LearnedBlocks
from benchmarks.routing_sim import SimConfig, simulate
from benchmarks.trace import TraceShape
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.policy import Policy
from proxy.routing.prefix import PrefixPolicy
from proxy.routing.round_robin import RoundRobin


def policies() -> list[Policy]:
    return [PrefixPolicy(), LearnedBlocks(), LeastLoaded(), RoundRobin()]


def run(sizes: tuple[int, ...], prompts_per_replica: int, progress: Any) -> list[dict[str, Any]]:
    rows = []
    cases: list[tuple[int, str]] = [(n, "static") for n in sizes] + [(sizes[-1], "join_leave")]
    for replicas, membership in cases:
        shape = TraceShape(
            prompts=prompts_per_replica * replicas,
            group_size=8,
            turns=3,
            template_tokens=128,
            max_tokens=64,
            seed=replicas,
        )
        total = shape.prompts * shape.group_size * shape.turns
        config = SimConfig(
            replicas=replicas,
            concurrency=64 * replicas,
            cache_blocks=2000,
            leave_at=total // 2 if membership == "join_leave" else None,
            join_at=3 * total // 4 if membership == "join_leave" else None,
        )
        for policy in policies():
            result = simulate(policy, shape, config)
            rows.append(
                {
                    "replicas": replicas,
                    "membership": membership,
                    "policy": policy.name,
                    "requests": result.requests,
                    "hit_rate": result.hit_rate,
                    "best_rate": result.best_rate,
                    "of_best": result.hit_rate / result.best_rate,
                    "max_mean": result.max_mean,
                    "spill_rate": result.spill_rate,
                    "reasons": dict(result.reasons),
                }
            )
            progress(f"{replicas} replicas {membership} {policy.name}: hit {result.hit_rate:.3f}")
    return rows
