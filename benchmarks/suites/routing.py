"""Suite ``routing``: cache hit rate and balance of each policy on GRPO traces.

For each fleet size, the same trace goes through each policy in ``sims.routing``; reported
against the best possible for the trace (one cache as large as the fleet's, seeing every
request). Workloads:
- ``grpo``: groups of 8, 3 turns, a 128-token shared template, group after group; a membership
  case has a replica leave half-way and another join later;
- ``grpo_interleaved``: the same, rollouts of 8 groups at a time interleaved;
- ``multi_turn``: 3 turns and no template at all, group after group;
- ``shared_prefix``: each group's 8 prompts share a 300-600 token prefix and end in their own
  40-token suffix, no template, one turn, group after group.
64 rollouts in flight per replica, finite per-replica caches (2,000 blocks).
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks import report
from benchmarks.harness.trace import TraceShape
from benchmarks.references import legend, marked
from benchmarks.sims.learned_blocks import LearnedBlocks
from benchmarks.sims.routing import SimConfig, simulate
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.policy import Policy
from proxy.routing.prefix import PrefixPolicy
from proxy.routing.round_robin import RoundRobin

WORKLOADS: dict[str, dict[str, Any]] = {
    "grpo": {"turns": 3, "template_tokens": 128},
    "grpo_interleaved": {"turns": 3, "template_tokens": 128, "interleave": 8},
    "multi_turn": {"turns": 3, "template_tokens": 0},
    "shared_prefix": {
        "turns": 1,
        "template_tokens": 0,
        "problem_tokens": (300, 600),
        "suffix_tokens": 40,
    },
}


def policies() -> list[Policy]:
    return [PrefixPolicy(), LearnedBlocks(), LeastLoaded(), RoundRobin()]


def run(
    sizes: tuple[int, ...],
    prompts_per_replica: int,
    progress: Any,
    workloads: tuple[str, ...] = tuple(WORKLOADS),
) -> list[dict[str, Any]]:
    rows = []
    cases = [("grpo", n, "static") for n in sizes] + [("grpo", sizes[-1], "join_leave")]
    cases += [(w, n, "static") for w in workloads if w != "grpo" for n in sizes]
    for workload, replicas, membership in cases:
        shape = TraceShape(
            prompts=prompts_per_replica * replicas,
            group_size=8,
            max_tokens=64,
            seed=replicas,
            **WORKLOADS[workload],
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
                    "workload": workload,
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
            progress(
                f"{workload} {replicas} replicas {membership} {policy.name}: "
                f"hit {result.hit_rate:.3f}"
            )
    return rows


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks routing``: every workload and fleet size, its table and chart."""
    sizes = (2, 3, 8) if args.quick else (2, 3, 8, 16)
    rows = run(sizes, 20 if args.quick else 60, report.progress)
    text = report.table(
        ["workload", "replicas", "membership", "policy", "hit_rate", "best", "of_best",
         "max/mean", "spill"],
        [[r["workload"], r["replicas"], r["membership"], marked(r["policy"]), r["hit_rate"],
          r["best_rate"], r["of_best"], r["max_mean"], r["spill_rate"]] for r in rows],
    )  # fmt: skip
    if refs := legend(r["policy"] for r in rows):
        text += "\n" + refs
    if args.plot:
        cases = list(dict.fromkeys((r["workload"], r["replicas"], r["membership"]) for r in rows))
        labels = [f"{w} {n} {m}" for w, n, m in cases]
        series = {
            p: [
                next(
                    r["hit_rate"]
                    for r in rows
                    if (r["workload"], r["replicas"], r["membership"]) == c and r["policy"] == p
                )
                for c in cases
            ]
            for p in dict.fromkeys(r["policy"] for r in rows)
        }
        series = {marked(p): values for p, values in series.items()}
        report.bar_chart(
            args.plot / "routing_hit_rate.png",
            "Prefix-cache hit rate (tokens)",
            labels,
            series,
            "hit rate",
        )
    return rows, text
