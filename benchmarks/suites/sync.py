"""Suite ``sync``: adapter fleet-sync latency under mount lag (``benchmarks.sync.mount``); with
``--push``, the grid of ``benchmarks.sync.push`` and its report; with ``--save``, the published
adapter's save time (``benchmarks.sync.adapter_save``).

Part A, the goal: a 5 MB adapter (rank 1 of a 1.5B model) on 2 / 8 / 16 replicas at mount lags
0 / 2.5 / 10 s, pushed and through the mount, in the same run.
Part B, the cost: 5 / 50 / 200 MB on 2 / 8 / 16 replicas, no link limit, 1 GB/s and 100 MB/s,
pushed (a push does not depend on the mount lag: these run at 2.5 s), against the model.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.sync import adapter_save, mount
from benchmarks.sync.push import MB, calibrate, predict, run_point


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks sync``: time to a fleet-wide load per mount lag and fleet size."""
    if args.push:
        return suite_push(args.quick, report.progress)
    if args.save:
        return adapter_save.suite(args.quick)
    lags = (0.0, 2.5) if args.quick else (0.0, 1.0, 2.5, 10.0)
    sizes = (3,) if args.quick else (2, 3, 8, 16)
    repeats = 3 if args.quick else 5
    rows = []
    for lag in lags:
        for replicas in sizes:
            report.progress(f"mount lag {lag} s, {replicas} replicas")
            rows.append(asyncio.run(mount.run_point(lag, replicas, repeats, seed=replicas)))
    text = report.table(
        ["lag_s", "replicas", "slowest_lag_s", "p50_over_lag_s", "max_over_lag_s"],
        [
            [
                r["lag_s"],
                r["replicas"],
                r["slowest_lag_s"],
                r["p50_over_lag_s"],
                r["max_over_lag_s"],
            ]
            for r in rows
        ],
    )
    return rows, text


def _runner() -> Callable[..., dict[str, Any]]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a core dependency
        factory = None
    else:
        factory = uvloop.new_event_loop
    base = Path(tempfile.mkdtemp(prefix="sync-push-"))

    def run(**kw: Any) -> dict[str, Any]:
        with (
            tempfile.TemporaryDirectory(dir=base) as point,
            asyncio.Runner(loop_factory=factory) as runner,
        ):
            return runner.run(run_point(**kw, seed=kw["replicas"], root=Path(point)))

    return run


def suite_push(quick: bool, progress: Callable[[str], None]) -> tuple[list[dict[str, Any]], str]:
    run = _runner()
    repeats = 2 if quick else 3
    lags = (0.0, 2.5) if quick else (0.0, 2.5, 10.0)
    fleets = (2, 8) if quick else (2, 8, 16)
    sizes = (5, 50) if quick else (5, 50, 200)
    links: tuple[float | None, ...] = (None, 100 * MB) if quick else (None, 1000 * MB, 100 * MB)
    progress("calibrating the model (1 replica, 5 and 200 MB)")
    model = calibrate(run)
    goal: list[dict[str, Any]] = []
    for lag in lags:
        for replicas in fleets:
            for mode in ("mount", "push"):
                progress(f"goal: {mode}, lag {lag} s, {replicas} replicas, 5 MB")
                point = {"lag_s": lag, "size": 5 * MB, "replicas": replicas, "link": None}
                goal.append(run(mode=mode, repeats=repeats, **point))
    cost: list[dict[str, Any]] = []
    for size in sizes:
        for replicas in fleets:
            for link in links:
                shown = "none" if link is None else f"{link / MB:g} MB/s"
                progress(f"cost: push {size} MB x {replicas} replicas, link {shown}")
                point = {"lag_s": 2.5, "size": size * MB, "replicas": replicas, "link": link}
                row = run(mode="push", repeats=repeats, **point)
                row["model_s"] = predict(model, size, replicas, link)
                row["ratio"] = row["p50_s"] / row["model_s"]
                cost.append(row)
    return [{"model": model}, *goal, *cost], _text(model, goal, cost)


def _link(row: dict[str, Any]) -> str:
    return "none" if row["link_mb_s"] is None else f"{row['link_mb_s']:g} MB/s"


def _text(model: dict[str, float], goal: list[dict[str, Any]], cost: list[dict[str, Any]]) -> str:
    by = {(r["lag_s"], r["replicas"], r["mode"]): r for r in goal}
    rows = []
    for lag, replicas, mode in by:
        if mode != "push":
            continue
        mount, push = by[(lag, replicas, "mount")], by[(lag, replicas, "push")]
        speedup = mount["p50_s"] / push["p50_s"]
        rows.append([lag, replicas, mount["p50_s"], push["p50_s"], push["max_s"], speedup])
    text = "A. 5 MB adapter, TRL's load to its 200 (seconds, p50 of the repeats)\n"
    text += report.table(
        ["lag_s", "replicas", "mount_p50", "push_p50", "push_max", "speed-up"], rows
    )
    text += "\n\nB. push cost against the model t0 + size x replicas / min(link, B)\n"
    text += report.table(
        ["size_mb", "replicas", "link", "push_p50", "model_s", "measured/model"],
        [
            [r["size_mb"], r["replicas"], _link(r), r["p50_s"], r["model_s"], r["ratio"]]
            for r in cost
        ],
    )
    text += (
        f"\nmodel: t0 {model['t0_s'] * 1000:.0f} ms, B {model['bytes_per_s'] / MB:.0f} MB/s "
        f"(this machine's whole push pipe); alone: disk write + fsync "
        f"{model['disk_write_fsync_bytes_per_s'] / MB:.0f} MB/s, sha256 "
        f"{model['sha256_bytes_per_s'] / MB:.0f} MB/s"
    )
    return text
