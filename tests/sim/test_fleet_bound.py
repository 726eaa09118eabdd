"""The fleet simulator's lower bound (``benchmarks/fleet/lower_bound.py``): its parts on cases
computed by hand, and no simulated policy beating it on the quick grid.

The grid test runs ``--quick``'s cells but shared_prefix on 8 replicas: that cell alone takes
about a minute on 2 cores (round robin and least-loaded recompute each group's 2,000-token
prefix for every rollout), more than the other three together; the three cover both workloads,
both fleet sizes, and a cell where routing moves the step time by 6 % (shared_prefix x2).
"""

from __future__ import annotations

import pytest

from benchmarks.fleet.lower_bound import Demand, fleet_seconds, least_cost, window_bound
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.sim import FleetRun
from benchmarks.fleet.suite import QUICK_SIZES, QUICK_WORKLOADS, run_grid

OVERHEAD_ONLY = GpuModel(step_s=0.01, prefill_token_s=0.0, seq_s=0.0, kv_token_s=0.0)


def test_the_fleet_needs_full_batches_of_step_overhead() -> None:
    # 100 tokens, 10 sequences at most at once, 10 ms a step whatever its size: 10 steps.
    assert fleet_seconds(100, 0.0, 1, 10, 10, OVERHEAD_ONLY) == pytest.approx(0.1)
    # Two replicas share the 10 in flight: 5 a step each, still 10 steps in all, 5 each.
    assert fleet_seconds(100, 0.0, 2, 10, 10, OVERHEAD_ONLY) == pytest.approx(0.1)
    # Prefill and context work adds its time (here on one replica, one sequence at a time).
    assert fleet_seconds(100, 0.5, 1, 10, 10, OVERHEAD_ONLY) == pytest.approx(0.6)


def test_unfinished_rollouts_can_spare_a_group_only_if_all_of_it_fits() -> None:
    groups = [10.0, 1.0, 1.0]
    rollouts = [[5.0, 5.0], [0.5, 0.5], [0.5, 0.5]]
    # Two in flight: group 0 stays unfinished, group 1 is consumed.
    assert least_cost(groups, rollouts, 1, 2) == pytest.approx(1.0)
    # One in flight: half of group 0 must finish anyway.
    assert least_cost(groups, rollouts, 1, 1) == pytest.approx(6.0)
    assert least_cost(groups, [], 2, 1) == pytest.approx(2.0)  # group terms alone


def _run(window_start: float) -> FleetRun:
    """Steps 3..5 measured (warm-up 2); syncs after steps 2 and 4, 1 s each."""
    return FleetRun(step_times=[1.0, 1.0, 1.0], warmup=2, window_start_s=window_start,
                    syncs={2: 1.0, 4: 1.0})  # fmt: skip


def test_a_trainer_bound_window_is_train_time_plus_its_syncs() -> None:
    need = Demand({3: 1.0, 4: 2.0, 5: 3.0}, step_max_s=0.0)
    bound = window_bound(_run(10.0), need, TrainerModel(train_s=2.0), SyncModel(sync_s=1.0))
    assert bound.trainer_s == pytest.approx((3 * 2.0 + 2 * 1.0) / 3)
    assert bound.step_s == bound.trainer_s


def test_a_fleet_bound_window_counts_frozen_syncs_and_the_last_train() -> None:
    need = Demand({3: 20.0, 4: 30.0, 5: 40.0}, step_max_s=0.0)
    trainer = TrainerModel(train_s=2.0)
    frozen = window_bound(_run(10.0), need, trainer, SyncModel(sync_s=1.0))
    # Step 5 starts after 40 s of generating and both syncs' freezes, then trains 2 s.
    assert frozen.fleet_s == pytest.approx((40.0 + 2.0 + 2.0 - 10.0) / 3)
    assert frozen.step_s == frozen.fleet_s
    flowing = window_bound(_run(10.0), need, trainer, SyncModel(sync_s=1.0, frozen=False))
    assert flowing.fleet_s == pytest.approx((40.0 + 2.0 - 10.0) / 3)
    # A step may run on into a freeze: that much of each sync still counts as generating.
    spill = window_bound(_run(10.0), Demand(need.active_s, 0.25), trainer, SyncModel(sync_s=1.0))
    assert spill.fleet_s == pytest.approx((40.0 + 2 * 0.75 + 2.0 - 10.0) / 3)


CELLS = [(w, n) for w in QUICK_WORKLOADS for n in QUICK_SIZES if (w, n) != ("shared_prefix", 8)]


@pytest.mark.parametrize(("workload", "replicas"), CELLS)
def test_no_policy_beats_the_lower_bound_on_the_quick_grid(workload: str, replicas: int) -> None:
    rows = run_grid(GpuModel(), TrainerModel(), SyncModel(), ProxyModel(per_replica_cap=192),
                    quick=True, workloads=(workload,), sizes=(replicas,))  # fmt: skip
    runs = [r for r in rows if r["lower_bound_s"] is not None]
    assert len(runs) == len(rows) - 1  # every policy, not the steady-state reference
    beaten = [(r["policy"], r["step_time_mean_s"], r["lower_bound_s"]) for r in runs
              if r["step_time_mean_s"] < r["lower_bound_s"]]  # fmt: skip
    assert not beaten
