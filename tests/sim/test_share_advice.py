"""``--what-if --share-runs K`` (``benchmarks/fleet/advice.py``, issue #25): the sharing model's
own verdict for K runs of the shape given, with the layout and the reason, and figures that are
the simulated rows' (small shapes, ``--quick``: a few seconds each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.__main__ import main
from benchmarks.fleet.sharing import PAYS_GPU, PAYS_STEP

SMALL = ["--quick", "--groups-per-step", "4", "--max-tokens", "256", "--sync-s", "1.0"]


def advise(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    out = tmp_path / "advice.json"
    assert main(["fleet", "--what-if", *SMALL, *extra, "--json", str(out)]) == 0
    sharing = json.loads(out.read_text())["results"]["sharing"]
    return sharing["advice"], sharing["rows"], sharing["advice"]["line"]


def test_a_trainer_bound_run_shares_on_the_cheapest_layout_that_pays(tmp_path: Path) -> None:
    """The trainer sets the pace (7 s a step): two runs on fewer replicas than two fleets of 3
    keep their step time, so sharing pays; the pick is the paying layout with the fewest
    GPU-hours, and the line says its figures."""
    advice, rows, line = advise(tmp_path, "--train-s", "7.0", "--max-replicas", "3",
                                "--share-runs", "2", "--separate-replicas", "3")  # fmt: skip
    paying = [r for r in rows if r["gpu_ratio"] <= PAYS_GPU and r["step_ratio"] <= PAYS_STEP]
    assert paying and advice["share"] is True
    best = min(paying, key=lambda r: r["gpu_ratio"])
    assert advice["replicas"] == best["replicas"]
    assert line == (
        f"share: 2 runs on {best['replicas']} replicas: {best['gpu_ratio']:.2f} x the GPU-hours "
        f"per run-step of 2 fleets of 3, {best['step_ratio']:.2f} x the step time"
    )


def test_a_fleet_sized_to_one_run_is_not_shared(tmp_path: Path) -> None:
    """Against what ``--what-if`` picks for one run, the layouts within 1.2 x the step do not
    save 25 %: no sharing, and the reason."""
    advice, rows, line = advise(tmp_path, "--max-replicas", "2", "--share-runs", "2")
    assert advice["share"] is False
    assert not [r for r in rows if r["gpu_ratio"] <= PAYS_GPU and r["step_ratio"] <= PAYS_STEP]
    assert line.startswith(
        f"do not share: the best layout (2 runs on {advice['replicas']}) is "
        f"{advice['gpu_ratio']:.2f} x the GPU-hours at {advice['step_ratio']:.2f} x the step"
    )
    assert "is already about what one run needs" in line


def test_runs_that_fill_the_shared_replicas_are_not_shared(tmp_path: Path) -> None:
    """Four fast runs of 16 groups on at most 2 replicas: every layout is past 1.2 x the step."""
    advice, rows, line = advise(tmp_path, "--groups-per-step", "16", "--max-tokens", "2048",
                                "--train-s", "0.5", "--max-replicas", "2", "--share-runs", "4",
                                "--separate-replicas", "1")  # fmt: skip
    assert advice["share"] is False
    assert all(r["step_ratio"] > PAYS_STEP for r in rows)
    assert "slower than 1.2 x the step: the shared replicas fill up" in line
