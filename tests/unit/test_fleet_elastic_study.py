"""The elastic study's quick form (``python -m benchmarks fleet --elastic --quick``): every run's
fields, the acceptance checks computed from them, the chart, and the checks' own rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import main
from benchmarks.fleet.elastic_rows import acceptance, settled

FIELDS = {
    "shape", "fleet", "label", "start_replicas", "max_inflight_tasks", "wall_s", "wall_min",
    "steps", "replica_hours", "trainer_hours", "gpu_hours", "gpu_hours_per_step", "dollars",
    "wasted_share", "waited_share", "mean_replicas", "peak_replicas", "final_replicas",
    "windows", "generation_bound_windows", "changes", "last_reason", "timeline",
    "step_time_series",
}  # fmt: skip


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("elastic")
    assert main(["fleet", "--elastic", "--quick", "--json", str(out / "e.json"),
                 "--plot", str(out)]) == 0  # fmt: skip
    return json.loads((out / "e.json").read_text())["results"], out


def test_the_quick_study_runs_every_shape_on_fixed_fleets_and_the_scaler(
    quick: tuple[dict[str, Any], Path],
) -> None:
    results, out = quick
    rows = results["rows"]
    assert {r["shape"] for r in rows} == {"growing", "shrinking", "constant"}
    assert all(set(r) >= FIELDS for r in rows)
    start, top = results["what_if"]["replicas"], results["scenario"]["max_replicas"]
    for shape in ("growing", "shrinking", "constant"):
        labels = {r["label"] for r in rows if r["shape"] == shape}
        assert {f"fixed {n}" for n in range(1, top + 1)} | {"scaler"} <= labels
    for r in rows:
        assert r["steps"] == results["scenario"]["steps"]
        assert r["gpu_hours"] == pytest.approx(r["replica_hours"] + 2 * r["trainer_hours"])
        assert r["dollars"] == pytest.approx(5 * r["replica_hours"] + 10 * r["trainer_hours"])
        if r["fleet"] == "fixed":
            assert r["mean_replicas"] == pytest.approx(r["start_replicas"]) and not r["changes"]
    scaler = next(r for r in rows if r["shape"] == "constant" and r["label"] == "scaler")
    assert scaler["start_replicas"] == start
    assert (out / "fleet_elastic.png").stat().st_size > 10_000
    checks = results["acceptance"]["scaler"]
    assert set(checks) == {"growing", "shrinking", "constant", "holds"}
    assert checks["holds"] == all(checks[s]["holds"] for s in ("growing", "shrinking", "constant"))


def test_the_growing_check_compares_with_the_fixed_fleets_within_five_percent() -> None:
    def run(label: str, wall_min: float, per_step: float, shape: str = "growing") -> dict[str, Any]:
        return {"shape": shape, "label": label, "fleet": label.split()[0], "wall_s": 60 * wall_min,
                "wall_min": wall_min, "gpu_hours_per_step": per_step, "gpu_hours": per_step,
                "start_replicas": 2, "final_replicas": 2,
                "timeline": [[0.0, 2, 0, 0]]}  # fmt: skip

    rows = [run("fixed 1", 100, 1.0), run("fixed 2", 60, 2.0), run("fixed 3", 62, 2.5),
            run("scaler", 62.9, 2.0)]  # fmt: skip
    growing = acceptance(rows, 2)["scaler"]["growing"]
    assert growing["fastest_fixed"] == "fixed 2"
    assert set(growing["fixed_within_wall"]) == {"fixed 2", "fixed 3"}  # not fixed 1: too slow
    assert growing["within_wall"] and growing["at_or_under"] and growing["holds"]
    slow = acceptance([*rows[:3], run("scaler", 63.1, 1.0)], 2)["scaler"]["growing"]
    assert not slow["within_wall"] and not slow["holds"]
    dear = acceptance([*rows[:3], run("scaler", 61.0, 2.1)], 2)["scaler"]["growing"]
    assert dear["within_wall"] and not dear["at_or_under"]


def test_a_fleet_has_settled_when_it_holds_over_the_last_quarter() -> None:
    row = {"wall_s": 100.0, "timeline": [[0.0, 1, 0, 0], [20.0, 1, 1, 0], [40.0, 2, 0, 0]]}
    assert settled(row, 2) and not settled(row, 1)
    late = {"wall_s": 100.0, "timeline": [[0.0, 2, 0, 0], [80.0, 2, 1, 0], [90.0, 3, 0, 0]]}
    assert not settled(late, 2) and not settled(late, 3)
