"""Several runs on one fleet (``benchmarks/fleet/runs.py``, ``sharing.py``; issue #25): one
run on the shared path is the single-run simulation, a run's sync holds only its own requests,
layouts beyond ``max_loras`` are refused, and the GPU-hour accounting adds up by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.runs import feasible, simulate_shared
from benchmarks.fleet.sharing import SHARING_HEADERS, gpu_s_per_run_step, layout
from benchmarks.fleet.sim import simulate
from benchmarks.fleet.workloads import WORKLOADS
from proxy.routing.prefix import PrefixPolicy

SMALL = TrainerModel(groups_per_step=4, max_inflight=64, max_tokens=512, train_s=0.2)
WORK = WORKLOADS["long_tail"]


def test_one_run_on_the_shared_path_is_the_single_run_simulation() -> None:
    """Same traffic, same names, same routing: the step times match to the last bit (a sync
    that does not freeze the fleet: a frozen one is a per-run hold on the shared path)."""
    kwargs = dict(informed=True, workload=WORK, replicas=2, gpu=GpuModel(), trainer=SMALL,
                  sync=SyncModel(sync_s=1.0, frozen=False),
                  proxy=ProxyModel(per_replica_cap=64), steps=8, warmup=2)  # fmt: skip
    alone = simulate(PrefixPolicy(), **kwargs)  # type: ignore[arg-type]
    shared = simulate_shared(PrefixPolicy(), runs=1, **kwargs)  # type: ignore[arg-type]
    assert shared.runs[0].step_times == alone.step_times
    assert shared.runs[0].wasted_tokens == alone.wasted_tokens


def test_a_runs_sync_holds_its_own_requests_and_not_the_others() -> None:
    """During each of run 0's syncs, run 0 sends nothing to the proxy and run 1's answers keep
    coming back (the fleet is not frozen for it); run 0's held requests go out at its end."""
    sync = SyncModel(sync_s=3.0, every=1)  # frozen, as the published proxy's
    got = simulate_shared(PrefixPolicy(), informed=True, workload=WORK, runs=2, replicas=2,
                          gpu=GpuModel(max_loras=12), trainer=SMALL, sync=sync,
                          proxy=ProxyModel(), steps=6, warmup=1)  # fmt: skip
    first, second = got.trainers
    assert len(first.sync_spans) == 5
    for start, end in first.sync_spans:
        assert not [t for t in first.sent_at if start < t < end]
        assert [t for t in second.answered_at if start < t < end]
        assert [t for t in first.sent_at if t == end]  # the held ones, at the resume


def test_layouts_beyond_max_loras_are_infeasible_and_not_simulated() -> None:
    """Two runs at max_staleness 4 each need a share of 6 (TRL's max_staleness + 2), so 12
    adapters per replica: 6 or 11 refuse them."""
    gpu = GpuModel(max_loras=6)
    assert feasible(1, TrainerModel(), gpu)
    assert not feasible(2, TrainerModel(), gpu)
    assert not feasible(2, TrainerModel(), replace(gpu, max_loras=11))
    assert feasible(2, TrainerModel(), replace(gpu, max_loras=12))
    alone = {
        "step_time_mean_s": 5.0,
        "utilization": 0.5,
        "wasted_share": 0.0,
        "tokens_per_replica_s": 1.0,
    }
    row = layout("published", WORK, 2, 3, gpu, SMALL, SyncModel(), ProxyModel(), quick=True,
                 separate=3, alone=alone, trainer_gpus=2, fit_loras=False)  # fmt: skip
    assert row["feasible"] is False
    assert row["loras_needed"] == 12
    assert "step_time_max_s" not in row


def test_gpu_hours_add_up_by_hand() -> None:
    """Two runs (2 trainer GPUs each) on 3 replicas, steps of 4 s and 6 s: 7 GPUs make 1/4 +
    1/6 = 5/12 run-steps a second, 16.8 GPU-seconds each; one run alone on 3: 5 x its step."""
    assert gpu_s_per_run_step(2, 3, [4.0, 6.0]) == pytest.approx(16.8)
    assert gpu_s_per_run_step(2, 3, [5.0]) == pytest.approx(25.0)


def test_the_cli_prints_one_layout_with_its_legend_and_writes_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--run-count 2 --shared-replica-count 2`` against separate fleets of 2: one row, every
    column named in the legend; with ``--max-loras 6`` the same layout is reported infeasible."""
    out = tmp_path / "runs.json"
    args = ["fleet", "--run-count", "2", "--shared-replica-count", "2",
            "--separate-replica-count", "2", "--quick", "--groups-per-step", "4",
            "--max-inflight-tasks", "64", "--max-tokens", "256", "--sync-s", "1.0"]  # fmt: skip
    assert main([*args, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    (row,) = json.loads(out.read_text())["results"]["rows"]
    assert row["feasible"] and row["runs"] == 2 and row["replicas"] == 2
    assert row["gpu_s_per_run_step"] == pytest.approx(gpu_s_per_run_step(2, 2, row["step_times_s"]))
    for column in SHARING_HEADERS:
        assert f"\n{column}: " in text
    assert main([*args, "--max-loras", "6"]) == 0
    assert "infeasible" in capsys.readouterr().out.split("\nconfig: ")[0]
