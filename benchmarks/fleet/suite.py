"""Suite ``fleet``: step time per routing policy, workload and fleet size; the published run
reproduced; the what-if table.

The grid keeps the published run's 128 rollouts in flight per replica (the write-up:
https://huggingface.co/blog/asyncgrpo-lora-hfjobs)
and sizes each step so that the fleet, not the trainer, sets the pace: as many groups per step
as make the steady-state reference's fleet time ``--grid-pressure`` (1.5) times the
trainer's own (``train_s`` plus its share of the syncs). At the published load the trainer is
the bottleneck from 3 replicas on and every policy's step time is the trainer's (the
validation shows it): routing can only show where the fleet is the bottleneck. The proxy's
per-replica cap is ``--per-replica-cap`` (192 here: with the published 128, every replica is
always full and no policy has a choice to make). All policies see the same traffic (every
length and token is drawn from the rollout's identity). Policies:
- ``prefix``: the proxy's default, seeing its own cost estimates and the replicas' /metrics;
- ``prefix_requests``: the same policy seeing request counts only (the proxy before this work,
  with today's stable keys and placement memory);
- ``least_loaded`` (request counts), ``least_cost`` (the least_loaded policy seeing costs and
  /metrics), ``round_robin``, ``learned_blocks`` (the published proxy's, benchmarks/);
- ``steady_state``: the steady-state reference (``steady_state.py``), not a policy.
Every policy row carries its run's lower bound (``lower_bound.py``: ``lower_bound_s``,
``of_lower_bound``; no routing of the same rollouts can beat it) and the reference
(``steady_state_s``, ``of_steady_state``; a short window can beat it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks.fleet.lower_bound import Bound, Demand, demand, window_bound
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.sim import FleetRun, simulate
from benchmarks.fleet.steady_state import SteadyState, steady_state
from benchmarks.fleet.workloads import WORKLOADS, Workload
from benchmarks.sims.learned_blocks import LearnedBlocks
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.policy import Policy
from proxy.routing.prefix import PrefixPolicy
from proxy.routing.round_robin import RoundRobin

# name -> (a new policy object, whether it sees costs and /metrics)
POLICIES: dict[str, tuple[Callable[[], Policy], bool]] = {
    "prefix": (PrefixPolicy, True),
    "prefix_requests": (PrefixPolicy, False),
    "least_loaded": (LeastLoaded, False),
    "least_cost": (LeastLoaded, True),
    "round_robin": (RoundRobin, False),
    "learned_blocks": (LearnedBlocks, False),
}
SIZES = (2, 8, 16, 64)
QUICK_SIZES = (2, 8)
QUICK_WORKLOADS = ("long_tail", "shared_prefix")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def steps_for(replicas: int, quick: bool) -> tuple[int, int]:
    """(steps, warm-up steps): fewer steps on bigger fleets (each step has more rollouts)."""
    if quick:  # under a minute on 2 cores; shared_prefix on 8 replicas is most of it
        return 8, 2
    return {2: 70, 8: 50, 16: 36}.get(replicas, 20), 6


def scaled(
    trainer: TrainerModel,
    replicas: int,
    pressure: float,
    workload: Workload,
    gpu: GpuModel,
    sync: SyncModel,
) -> TrainerModel:
    """128 rollouts in flight per replica, and as many groups per step as make the fleet's
    steady-state time ``pressure`` times the trainer's (at 1 or below, the trainer sets the
    pace and routing cannot change the step time)."""
    shape = replace(trainer, groups_per_step=1, max_inflight=128 * replicas)
    one = steady_state(workload, replicas, gpu, shape, sync)
    pause = (one.trainer_s - trainer.train_s) if sync.frozen else 0.0
    per_group = one.fleet_s - pause
    groups = (pressure * one.trainer_s - pause) / per_group
    return replace(shape, groups_per_step=max(1, round(groups)))


def measure(
    policy: Policy,
    *,
    informed: bool,
    workload: Workload,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    steps: int,
    warmup: int,
    need: Demand | None = None,
) -> tuple[FleetRun, Bound]:
    """One simulated run and its lower bound; ``need`` (``demand`` for this cell) when several
    runs share the cell, else computed here."""
    if need is None:
        window = range(warmup + 1, steps + 1)
        need = demand(workload, replicas, gpu, trainer, proxy.per_replica_cap, window)
    run = simulate(policy, informed=informed, workload=workload, replicas=replicas, gpu=gpu,
                   trainer=trainer, sync=sync, proxy=proxy, steps=steps, warmup=warmup)  # fmt: skip
    return run, window_bound(run, need, trainer, sync)


def row(
    workload: str, replicas: int, policy: str, run: FleetRun, bound_s: float, steady_s: float
) -> dict[str, Any]:
    times = run.step_times
    mean = run.mean_step_s
    return {
        "workload": workload,
        "replicas": replicas,
        "policy": policy,
        "step_time_p50_s": percentile(times, 0.5),
        "step_time_p99_s": percentile(times, 0.99),
        "step_time_mean_s": mean,
        "lower_bound_s": bound_s,
        "of_lower_bound": mean / bound_s,
        "steady_state_s": steady_s,
        "of_steady_state": mean / steady_s,
        "hit_rate": run.hit_rate,
        "utilization": run.utilization,
        "preemptions": run.preemptions,
        "wasted_tokens": run.wasted_tokens,
        "requests": run.requests,
        "steps": len(times),
    }


def run_grid(
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    *,
    quick: bool,
    pressure: float = 1.5,
    workloads: tuple[str, ...] | None = None,
    sizes: tuple[int, ...] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    rows = []
    names = workloads or (QUICK_WORKLOADS if quick else tuple(WORKLOADS))
    for name in names:
        workload = WORKLOADS[name]
        for replicas in sizes or (QUICK_SIZES if quick else SIZES):
            shape = scaled(trainer, replicas, pressure, workload, gpu, sync)
            steps, warmup = steps_for(replicas, quick)
            steady = steady_state(workload, replicas, gpu, shape, sync)
            window = range(warmup + 1, steps + 1)
            need = demand(workload, replicas, gpu, shape, proxy.per_replica_cap, window)
            for policy, (factory, informed) in POLICIES.items():
                run, bound = measure(
                    factory(),
                    informed=informed,
                    workload=workload,
                    replicas=replicas,
                    gpu=gpu,
                    trainer=shape,
                    sync=sync,
                    proxy=proxy,
                    steps=steps,
                    warmup=warmup,
                    need=need,
                )
                rows.append(row(name, replicas, policy, run, bound.step_s, steady.step_s))
                progress(f"{name} x{replicas} {policy}: {rows[-1]['step_time_mean_s']:.2f} s")
            rows.append(steady_row(name, replicas, steady))
    return rows


def steady_row(workload: str, replicas: int, steady: SteadyState) -> dict[str, Any]:
    return {
        "workload": workload,
        "replicas": replicas,
        "policy": "steady_state",
        "step_time_p50_s": steady.step_s,
        "step_time_p99_s": steady.step_s,
        "step_time_mean_s": steady.step_s,
        "lower_bound_s": None,
        "of_lower_bound": None,
        "steady_state_s": steady.step_s,
        "of_steady_state": 1.0,
        "hit_rate": steady.hit_rate,
        "utilization": steady.utilization,
        "preemptions": 0,
        "wasted_tokens": 0,
        "requests": 0,
        "steps": 0,
    }


# -- the published run (huggingface.co/blog/asyncgrpo-lora-hfjobs) -------------------------

PUBLISHED = {(384, 3): 6.4}  # 500 steps in 53 min


def validate(
    gpu: GpuModel, trainer: TrainerModel, sync: SyncModel, *, quick: bool
) -> list[dict[str, Any]]:
    """The published configuration: 16 groups of 8 per step, a sync every 2 steps taking the
    published 5.8 s with 3 replicas, the proxy's default cap (128); 128 or 384 in flight, 2 or
    3 replicas; long-tailed math reasoning lengths."""
    rows = []
    steps, warmup = (10, 2) if quick else (80, 8)
    published_sync = replace(sync, sync_s=sync.sync_s if sync.sync_s is not None else 5.8)
    for inflight in (128, 384):
        for replicas in (2, 3):
            shape = replace(trainer, groups_per_step=16, max_inflight=inflight)
            run, bound = measure(
                PrefixPolicy(),
                informed=True,
                workload=WORKLOADS["long_tail"],
                replicas=replicas,
                gpu=gpu,
                trainer=shape,
                sync=published_sync,
                proxy=ProxyModel(per_replica_cap=128),
                steps=steps,
                warmup=warmup,
            )
            steady = steady_state(WORKLOADS["long_tail"], replicas, gpu, shape, published_sync)
            rows.append(
                {
                    "max_inflight": inflight,
                    "replicas": replicas,
                    "step_time_mean_s": run.mean_step_s,
                    "step_time_p50_s": percentile(run.step_times, 0.5),
                    "lower_bound_s": bound.step_s,
                    "steady_state_s": steady.step_s,
                    "published_s": PUBLISHED.get((inflight, replicas)),
                    "hit_rate": run.hit_rate,
                    "wasted_tokens": run.wasted_tokens,
                }
            )
    return rows


# -- what if -------------------------------------------------------------------------------
