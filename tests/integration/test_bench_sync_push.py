"""``python -m benchmarks sync --push`` measures what it says: both paths, every load a 200."""

from __future__ import annotations

from pathlib import Path

from benchmarks.sync.push import MB, predict, run_point


async def test_a_grid_point_times_the_push_and_the_mount_path(tmp_path: Path) -> None:
    pushed = await run_point(
        mode="push", lag_s=0.5, size=MB, replicas=2, link=None, repeats=2, seed=1,
        root=tmp_path / "push",
    )  # fmt: skip
    mounted = await run_point(
        mode="mount", lag_s=0.5, size=MB, replicas=2, link=None, repeats=2, seed=1,
        root=tmp_path / "mount",
    )  # fmt: skip
    assert len(pushed["times_s"]) == len(mounted["times_s"]) == 2
    # The mount path waits for the slowest mount; a push does not wait for any.
    assert min(mounted["times_s"]) >= mounted["slowest_lag_s"]
    assert pushed["mode"] == "push" and mounted["mode"] == "mount"


def test_the_model_is_size_times_replicas_over_the_narrower_pipe() -> None:
    model = {"t0_s": 0.05, "bytes_per_s": 500 * MB}
    assert predict(model, 100, 4, None) == 0.05 + 400 * MB / (500 * MB)
    assert predict(model, 100, 4, 100 * MB) == 0.05 + 4.0
