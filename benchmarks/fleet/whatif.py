"""``--what-if``: how many replicas and what ``max_inflight_tasks``, chosen by what a trained step
costs.

Each setting (1..``max_replicas`` replicas x in-flight counts) is simulated; its cost is the
GPU-seconds one trained step takes, replicas' and trainer's together:
``(replicas x replica_gpus + trainer_gpus) x mean step``. The GPUs run whatever they generate,
so the rollouts TRL drops as too stale are already inside that figure; what waste costs beyond
it is learning: a setting that drops a tenth of its groups trains on groups at the edge of
``max_staleness``. So the waste is a budget, not a price. And the run's wall time is worth
something too: GPU-time alone always favours the smallest fleet that keeps up, however much
slower. The recommendation is the setting with the least GPU-time per trained step among those
that waste at most ``max_waste`` of the generated tokens (``--max-waste``, 3 %) and step within
``max_slowdown`` of the fastest setting (``--max-slowdown``, 5 %); the lines below it say what
the fastest setting, and the cheapest one within the waste budget (slower), cost instead.

The in-flight counts tried are 1-4 x a step's rollouts (``groups_per_step x group_size``), then,
for each fleet size, the largest count within the budget between two of those (a bisection in
whole groups: waste grows with the count), since the best setting within a waste budget sits
just below where waste starts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.suite import measure
from benchmarks.fleet.workloads import Workload
from proxy.routing.prefix import PrefixPolicy

MAX_WASTE = 0.03  # the default waste budget: a share of the generated tokens
MAX_SLOWDOWN = 0.05  # the default: a step at most this much slower than the fastest setting's
# This project's sync as measured (benchmarks/README.md, "sync"): a push, the fleet generating
# through it. ``--sync-published`` takes the published sync (SyncModel's defaults) instead.
PROJECT_SYNC = SyncModel(mode="push", frozen=False, pause_s=0.01, save_s=0.05, push_s=0.1)
FACTORS = (1, 2, 3, 4)


@dataclass(frozen=True, slots=True)
class Costs:
    replica_gpus: int = 1
    trainer_gpus: int = 2  # deploy's trainer: h200x2
    max_waste: float = MAX_WASTE
    max_slowdown: float = MAX_SLOWDOWN

    def gpu_s(self, row: dict[str, Any]) -> float:
        gpus = row["replicas"] * self.replica_gpus + self.trainer_gpus
        return float(gpus * row["step_time_mean_s"])


class Grid:
    """The simulated settings of one what-if."""

    def __init__(
        self, workload: Workload, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel,
        proxy: ProxyModel, quick: bool, costs: Costs,
    ) -> None:  # fmt: skip
        self.workload, self.gpu, self.trainer, self.sync, self.proxy = (
            workload, gpu, trainer, sync, proxy,
        )  # fmt: skip
        self.steps, self.warmup = (12, 3) if quick else (30, 5)
        self.costs = costs
        self.rows: dict[tuple[int, int], dict[str, Any]] = {}

    def row(self, replicas: int, inflight: int) -> dict[str, Any]:
        found = self.rows.get((replicas, inflight))
        if found is not None:
            return found
        shape = replace(self.trainer, max_inflight=inflight)
        share = -(-inflight // replicas)
        cap = replace(self.proxy, per_replica_cap=max(self.proxy.per_replica_cap, share))
        run, bound = measure(
            PrefixPolicy(), informed=True, workload=self.workload, replicas=replicas,
            gpu=self.gpu, trainer=shape, sync=self.sync, proxy=cap, steps=self.steps,
            warmup=self.warmup,
        )  # fmt: skip
        row = {
            "replicas": replicas,
            "max_inflight_tasks": inflight,
            "step_time_mean_s": run.mean_step_s,
            "lower_bound_s": bound.step_s,
            "wasted_share": run.wasted_tokens / max(run.generated_tokens, 1),
            "utilization": run.utilization,
        }
        row["gpu_s_per_step"] = self.costs.gpu_s(row)
        self.rows[(replicas, inflight)] = row
        return row

    def refine(self, replicas: int) -> None:
        """The largest in-flight count within the waste budget between two coarse ones."""
        group = self.trainer.group_size
        per_step = self.trainer.groups_per_step * group
        coarse = [self.row(replicas, per_step * f) for f in FACTORS]
        within = [r for r in coarse if r["wasted_share"] <= self.costs.max_waste]
        over = [r for r in coarse if r["wasted_share"] > self.costs.max_waste]
        if not within or not over:
            return
        low = max(r["max_inflight_tasks"] for r in within) // group
        high = min(r["max_inflight_tasks"] for r in over if r["max_inflight_tasks"] > low * group)
        high //= group
        while high - low > 1:
            middle = (low + high) // 2
            if self.row(replicas, middle * group)["wasted_share"] <= self.costs.max_waste:
                low = middle
            else:
                high = middle


def what_if(
    workload: Workload, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel,
    proxy: ProxyModel, *, max_replicas: int, quick: bool, costs: Costs | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """The rows (sorted by replicas, then in-flight count) and the recommendation: the row, and
    ``fastest`` and ``cheapest`` (regardless of waste) for comparison."""
    costs = costs or Costs()
    grid = Grid(workload, gpu, trainer, sync, proxy, quick, costs)
    for replicas in range(1, max_replicas + 1):
        grid.refine(replicas)
    rows = [grid.rows[key] for key in sorted(grid.rows)]
    return rows, recommend(rows, costs)


def recommend(rows: list[dict[str, Any]], costs: Costs) -> dict[str, Any]:
    def cost(row: dict[str, Any]) -> tuple[float, int]:
        return row["gpu_s_per_step"], row["replicas"]

    fastest = min(rows, key=lambda r: (r["step_time_mean_s"], r["gpu_s_per_step"]))
    limit = (1 + costs.max_slowdown) * fastest["step_time_mean_s"]
    quick = [r for r in rows if r["step_time_mean_s"] <= limit]
    thrifty = [r for r in rows if r["wasted_share"] <= costs.max_waste]
    within = [r for r in quick if r["wasted_share"] <= costs.max_waste]
    pick = min(within, key=cost) if within else min(quick, key=lambda r: r["wasted_share"])
    return {
        **pick,
        "within_budget": bool(within),
        "max_waste": costs.max_waste,
        "max_slowdown": costs.max_slowdown,
        "fastest": fastest,
        "cheapest": min(thrifty, key=cost) if thrifty else None,
    }


def lines(pick: dict[str, Any], costs: Costs) -> str:
    """The recommendation, and what the fastest and the cheapest settings cost instead."""

    def setting(row: dict[str, Any]) -> str:
        return (
            f"{row['replicas']} replicas, max_inflight_tasks {row['max_inflight_tasks']}"
            f" (mean step {row['step_time_mean_s']:.2f} s,"
            f" {100 * row['wasted_share']:.1f} % of generated tokens wasted,"
            f" {row['gpu_s_per_step']:.1f} GPU-s per step)"
        )

    def versus(row: dict[str, Any]) -> str:
        extra = row["gpu_s_per_step"] / pick["gpu_s_per_step"] - 1
        slower = row["step_time_mean_s"] / pick["step_time_mean_s"] - 1
        return f"{setting(row)}: {100 * extra:+.0f} % GPU-time, {100 * slower:+.0f} % step time"

    gpus = f"{costs.replica_gpus} GPU per replica, {costs.trainer_gpus} for the trainer"
    budget = f"{100 * costs.max_waste:g} % waste (--max-waste)"
    slack = f"{100 * costs.max_slowdown:g} % of the fastest step (--max-slowdown)"
    if pick["within_budget"]:
        head = f"recommended: {setting(pick)}: the least GPU-time per trained step ({gpus}) "
        head += f"within {budget} and {slack}"
    else:
        head = f"recommended: {setting(pick)}: no setting within {slack} stays within {budget}"
        head += "; the least waste"
    out = [head]
    chosen = _key(pick)
    fastest, cheapest = pick["fastest"], pick["cheapest"]
    if _key(fastest) != chosen:
        out.append(f"fastest: {versus(fastest)}")
    if cheapest is not None and _key(cheapest) not in (chosen, _key(fastest)):
        out.append(f"cheapest within the waste budget: {versus(cheapest)}")
    return "\n".join(out)


def _key(row: dict[str, Any]) -> tuple[int, int]:
    return row["replicas"], row["max_inflight_tasks"]


def chart(path: Path, rows: list[dict[str, Any]], pick: dict[str, Any]) -> None:
    """Each fleet size's settings as (mean step, waste), the recommendation ringed."""
    sizes = sorted({r["replicas"] for r in rows})
    series = {
        f"{n} replicas": [
            (r["step_time_mean_s"], 100 * r["wasted_share"]) for r in rows if r["replicas"] == n
        ]
        for n in sizes
    }
    name = f"recommended: {pick['replicas']} x {pick['max_inflight_tasks']} in flight"
    report.scatter_chart(
        path, "What-if: step time and waste per setting", series,
        "mean step (s)", "% of generated tokens wasted",
        marked=(name, (pick["step_time_mean_s"], 100 * pick["wasted_share"])),
    )  # fmt: skip
