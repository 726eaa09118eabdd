"""``python -m benchmarks fleet``: the JSON rows the issue asks for, and the what-if answer."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import main
from benchmarks.fleet.cli import build, build_parser, gpu_for, step_time_figure, sync_for
from benchmarks.fleet.model import GpuModel, SyncModel
from benchmarks.fleet.whatif import PROJECT_SYNC, Costs, lines, recommend

SMALL = ["--groups-per-step", "4", "--max-tokens", "256", "--train-s", "0.5"]


def test_the_suite_writes_one_row_per_workload_size_and_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    args = ["fleet", "--quick", "--workloads", "uniform", "--sizes", "2", "--json", str(out)]
    assert main([*args, *SMALL, "--sync-s", "1.0"]) == 0
    results = json.loads(out.read_text())["results"]
    rows = results["rows"]
    assert {r["policy"] for r in rows} >= {"prefix", "learned_blocks", "steady_state"}
    assert all(r["workload"] == "uniform" and r["replicas"] == 2 for r in rows)
    assert {(v["max_inflight"], v["replicas"]) for v in results["validation"]} == {
        (128, 2), (128, 3), (384, 2), (384, 3)
    }  # fmt: skip
    assert "published run" in capsys.readouterr().out


def test_what_if_recommends_a_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fleet", "--what-if", "--quick", "--max-replicas", "2", "--sync-s", "1.0"]
    assert main([*args, *SMALL]) == 0
    assert "recommended:" in capsys.readouterr().out


def test_another_gpu_or_model_scales_the_calibrated_replica() -> None:
    base = gpu_for("h200", "qwen2.5-1.5b", None, None)
    assert base.step_s == pytest.approx(GpuModel().step_s)
    assert base.seq_s == pytest.approx(GpuModel().seq_s)
    bigger = gpu_for("h100", "qwen2.5-7b", None, None)
    assert bigger.step_s > base.step_s  # more weights read per step, at less bandwidth
    assert bigger.kv_blocks < base.kv_blocks


def test_the_sync_phases_and_frozen_are_flags() -> None:
    args = build_parser().parse_args(
        ["--sync-pause-s", "0.002", "--sync-barrier-s", "0.01", "--sync-save-s", "0.005",
         "--sync-mode", "push", "--sync-push-s", "0.13", "--sync-resume-s", "0.002",
         "--sync-unload-s", "0.002", "--sync-frozen", "no"]
    )  # fmt: skip
    sync = build(SyncModel, args, "sync_")
    assert sync == SyncModel(pause_s=0.002, barrier_s=0.01, save_s=0.005, mode="push",
                             push_s=0.13, resume_s=0.002, unload_s=0.002, frozen=False)  # fmt: skip
    assert sync.draw(random.Random(0), 3) == pytest.approx(0.151)
    assert build(SyncModel, build_parser().parse_args([]), "sync_") == SyncModel()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--sync-frozen", "maybe"], "--sync-frozen"),
        (["--sync-mode", "rsync"], "--sync-mode"),
        (["--sync-mode", "pushh"], "--sync-mode"),  # a typo is refused, not run as "mount"
        (["--quick", "--share-run-count", "2"], "with --what-if only"),
        (["--what-if", "--share-run-count", "2", "--run-count", "2"], "with --what-if only"),
        (["--what-if", "--share-run-count", "1"], "at least 2 runs (got 1)"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["fleet", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and argv[1] in err


def test_a_sync_model_names_a_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode: expected one of mount, push, got 'rsync'"):
        SyncModel(mode="rsync")


def test_the_help_names_only_flags_the_parser_takes() -> None:
    parser = build_parser()
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", parser.format_help()))
    taken = {option for action in parser._actions for option in action.option_strings}
    assert len(named) > 30  # the walk saw the help
    assert named - taken == set()


def test_the_closing_line_names_every_file_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    args = ["fleet", "--quick", "--workloads", "uniform", "--sizes", "2", "--json", str(out)]
    assert main([*args, "--plot", str(tmp_path), *SMALL, "--sync-s", "1.0"]) == 0
    closing = capsys.readouterr().out.rstrip().splitlines()[-1]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["fleet.json", "fleet_step_time.png"]
    assert closing == f"wrote {tmp_path / 'fleet_step_time.png'}, {out}"


def test_references_are_marked_and_told_apart(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fleet", "--quick", "--workloads", "uniform", "--sizes", "2", *SMALL, "--sync-s", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    for reference in ("prefix_requests", "least_cost", "learned_blocks", "steady_state"):
        assert f" {reference}* " in out, reference
    for choice in ("prefix", "least_loaded", "round_robin"):
        assert f" {choice} " in out and f" {choice}* " not in out, choice
    legend = next(line for line in out.splitlines() if line.startswith("* a reference"))
    assert "not a --policy choice" in legend and "learned_blocks (" in legend


def test_the_step_time_chart_draws_the_bound_as_a_bound_not_a_policy() -> None:
    rows = [
        {"workload": "uniform", "replicas": 2, "policy": p, "step_time_mean_s": t,
         "lower_bound_s": b}
        for p, t, b in [("prefix", 8.5, 6.0), ("learned_blocks", 8.4, 6.1),
                        ("steady_state", 8.3, None)]
    ]  # fmt: skip
    figure = step_time_figure(rows)
    assert list(figure["series"]) == ["prefix", "learned_blocks*"]  # no bound, no reference bar
    assert figure["bounds"] == {"prefix": [6.0], "learned_blocks*": [6.1]}
    assert figure["reference"] == ("steady-state reference", [8.3])
    assert figure["labels"] == ["uniform, 2 replicas"]


def _row(replicas: int, inflight: int, step: float, waste: float) -> dict[str, Any]:
    row = {"replicas": replicas, "max_inflight_tasks": inflight, "step_time_mean_s": step,
           "wasted_share": waste}  # fmt: skip
    row["gpu_s_per_step"] = Costs().gpu_s(row)
    return row


def test_the_what_if_recommends_the_cheapest_step_within_the_waste_and_time_budgets() -> None:
    """The issue's rows: the fastest (3 x 384) wastes 11.7 %; 3 x 336 is the cheapest within 3 %
    waste and 5 % of the fastest step; 2 replicas are cheaper still but 13 % slower."""
    rows = [
        _row(2, 352, 4.31, 0.024), _row(3, 320, 3.882, 0.003), _row(3, 336, 3.805, 0.016),
        _row(3, 384, 3.75, 0.117), _row(4, 320, 3.627, 0.022), _row(4, 384, 3.625, 0.163),
    ]  # fmt: skip
    pick = recommend(rows, Costs())
    assert (pick["replicas"], pick["max_inflight_tasks"]) == (3, 336)
    assert pick["fastest"]["max_inflight_tasks"] == 384
    assert (pick["cheapest"]["replicas"], pick["cheapest"]["max_inflight_tasks"]) == (2, 352)
    text = lines(pick, Costs())
    assert "fastest: 4 replicas, max_inflight_tasks 384" in text
    assert "cheapest within the waste budget: 2 replicas" in text
    loose = recommend(rows, Costs(max_waste=0.2))
    assert (loose["replicas"], loose["max_inflight_tasks"]) == (3, 384)  # waste allowed: cheaper
    none = recommend([_row(3, 384, 3.75, 0.117), _row(3, 512, 3.8, 0.3)], Costs())
    assert not none["within_budget"]
    assert none["max_inflight_tasks"] == 384  # the least waste


def test_the_what_if_describes_this_projects_sync_and_the_published_one_is_a_flag_away() -> None:
    parse = build_parser().parse_args
    assert sync_for(parse(["--what-if"])) == PROJECT_SYNC
    assert sync_for(parse(["--what-if", "--sync-push-s", "0.2"])) == replace(
        PROJECT_SYNC, push_s=0.2
    )
    assert sync_for(parse(["--what-if", "--sync-published"])) == SyncModel()
    assert sync_for(parse([])) == SyncModel()  # the suite reproduces the published run
