"""The elastic study's figures: one row per run (what it cost, how long it took, what the scaler
did) and the issue's acceptance checks computed from the rows (``elastic_study.py``).

Costs: a run holds each replica's GPUs from its launch until it is gone and the trainer's over
the whole wall time; GPU-hours = replica-hours x the replica's GPUs + wall hours x the
trainer's; dollars the same at deploy's prices per hour. Every run trains the same steps, so
per step is the total over the steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.fleet.elastic import ElasticRun
from deploy.plan import Flavors, gpu_count
from deploy.prices import DOLLARS_PER_HOUR

SLOWDOWN = 0.05  # the issue's: a wall time within 5 % of the fastest fixed fleet's
SETTLED_SHARE = 0.25  # a fleet has settled when it holds over this last share of the run
SERIES_STEPS = 10  # the step-time series: the mean over each this many steps


@dataclass(frozen=True, slots=True)
class Prices:
    """A replica's and the trainer's GPUs and prices per hour."""

    replica_gpus: int
    trainer_gpus: int
    replica_per_h: float
    trainer_per_h: float

    @classmethod
    def deploy(cls) -> Prices:
        """Deploy's flavours (a replica: the published run's h200; the trainer: h200x2)."""
        replica, trainer = Flavors().replica, Flavors().trainer
        return cls(gpu_count(replica), gpu_count(trainer),
                   DOLLARS_PER_HOUR[replica], DOLLARS_PER_HOUR[trainer])  # fmt: skip


def row(
    shape: str, label: str, replicas: int, count: int, run: ElasticRun, prices: Prices
) -> dict[str, Any]:
    wall_h, replica_h = run.wall_s / 3600, run.replica_s / 3600
    gpu_h = replica_h * prices.replica_gpus + wall_h * prices.trainer_gpus
    ready = [r for _, r, _, _ in run.timeline]
    ends = run.step_ends
    series = [
        [round(ends[i] / 60, 3), round((ends[i] - (ends[i - SERIES_STEPS] if i >= SERIES_STEPS
                                                 else 0.0)) / min(i + 1, SERIES_STEPS), 3)]
        for i in range(SERIES_STEPS - 1, len(ends), SERIES_STEPS)
    ]  # fmt: skip
    return {
        "shape": shape,
        "fleet": "scaler" if label.startswith("scaler") else "fixed",
        "label": label,
        "start_replicas": replicas,
        "max_inflight_tasks": count,
        "wall_s": run.wall_s,
        "wall_min": run.wall_s / 60,
        "steps": run.steps,
        "replica_hours": replica_h,
        "trainer_hours": wall_h,
        "gpu_hours": gpu_h,
        "gpu_hours_per_step": gpu_h / run.steps,
        "dollars": replica_h * prices.replica_per_h + wall_h * prices.trainer_per_h,
        "wasted_share": run.wasted_tokens / max(run.generated_tokens, 1),
        "waited_share": run.waited_s / run.wall_s,
        "hit_rate": run.hit_rate,
        "mean_replicas": run.replica_s / run.wall_s,
        "peak_replicas": max(ready),
        "final_replicas": ready[-1],
        "generation_bound_windows": sum(1 for d in run.decisions if d["verdict"]),
        "changes": [d for d in run.decisions if d["action"] != "hold"],
        # Every window: [at_s, the trainer's wait share, ready, starting, draining, action].
        "windows": [
            [
                d["at_s"],
                round(d["waited"], 3),
                d["ready"],
                d["starting"],
                d["draining"],
                d["action"],
            ]
            for d in run.decisions
        ],
        "last_reason": run.decisions[-1]["reason"] if run.decisions else None,
        "timeline": [list(t) for t in run.timeline],
        "step_time_series": series,
    }


def settled(row: dict[str, Any], target: int) -> bool:
    """Whether the fleet held ``target`` ready replicas, none starting or draining, over the last
    ``SETTLED_SHARE`` of the run."""
    since = (1 - SETTLED_SHARE) * row["wall_s"]
    timeline = row["timeline"]
    last = max(i for i, (t, *_) in enumerate(timeline) if t <= since)
    return all(ready == target and not starting and not draining
               for _, ready, starting, draining in timeline[last:])  # fmt: skip


def acceptance(rows: list[dict[str, Any]], start: int) -> dict[str, Any]:
    """The issue's checks for each scaler run (``scaler`` is the one the issue asks about)."""
    out: dict[str, Any] = {}
    labels = dict.fromkeys(r["label"] for r in rows if r["fleet"] == "scaler")
    for label in labels:
        checks: dict[str, Any] = {}
        growing = _one(rows, "growing", label)
        if growing is not None:
            checks["growing"] = _growing(rows, growing)
        shrinking = _one(rows, "shrinking", label)
        if shrinking is not None:
            fixed = _one(rows, "shrinking", f"fixed {shrinking['start_replicas']}")
            assert fixed is not None
            checks["shrinking"] = {
                "gpu_hours": shrinking["gpu_hours"],
                "fixed_start": fixed["label"],
                "fixed_start_gpu_hours": fixed["gpu_hours"],
                "holds": shrinking["gpu_hours"] < fixed["gpu_hours"],
            }
        constant = _one(rows, "constant", label)
        if constant is not None:
            checks["constant"] = {
                "what_if_replicas": start,
                "final_replicas": constant["final_replicas"],
                "holds": settled(constant, start),
            }
        checks["holds"] = all(c["holds"] for c in checks.values())
        out[label] = checks
    return out


def _one(rows: list[dict[str, Any]], shape: str, label: str) -> dict[str, Any] | None:
    return next((r for r in rows if r["shape"] == shape and r["label"] == label), None)


def _growing(rows: list[dict[str, Any]], scaler: dict[str, Any]) -> dict[str, Any]:
    fixed = [r for r in rows if r["shape"] == scaler["shape"] and r["fleet"] == "fixed"]
    fastest = min(fixed, key=lambda r: r["wall_s"])
    limit = (1 + SLOWDOWN) * fastest["wall_s"]
    within = [r for r in fixed if r["wall_s"] <= limit]
    quick = scaler["wall_s"] <= limit
    cheap = all(scaler["gpu_hours_per_step"] <= r["gpu_hours_per_step"] for r in within)
    return {
        "fastest_fixed": fastest["label"],
        "wall_limit_min": limit / 60,
        "wall_min": scaler["wall_min"],
        "within_wall": quick,
        "gpu_hours_per_step": scaler["gpu_hours_per_step"],
        "fixed_within_wall": {r["label"]: r["gpu_hours_per_step"] for r in within},
        "at_or_under": cheap,
        "holds": quick and cheap,
    }


def acceptance_lines(checks: dict[str, Any]) -> str:
    """One line per scaler run: each check, its figures and whether it holds."""
    out = []
    for label, found in checks.items():
        parts = []
        if "growing" in found:
            g = found["growing"]
            over = [f"{k} {v:.5f}" for k, v in g["fixed_within_wall"].items()]
            parts.append(
                f"growing: {g['wall_min']:.1f} min against the {g['wall_limit_min']:.1f} allowed "
                f"(5 % over {g['fastest_fixed']}): {_yes(g['within_wall'])}; "
                f"{g['gpu_hours_per_step']:.5f} GPU-h per step against {', '.join(over)}: "
                f"{_yes(g['at_or_under'])}"
            )
        if "shrinking" in found:
            s = found["shrinking"]
            parts.append(
                f"shrinking: {s['gpu_hours']:.2f} GPU-h against {s['fixed_start']}'s "
                f"{s['fixed_start_gpu_hours']:.2f}: {_yes(s['holds'])}"
            )
        if "constant" in found:
            c = found["constant"]
            parts.append(
                f"constant: ends on {c['final_replicas']}, the what-if's {c['what_if_replicas']}"
                f", settled: {_yes(c['holds'])}"
            )
        out.append(f"acceptance, {label}: {'; '.join(parts)} -> {_yes(found['holds'])}")
    return "\n".join(out)


def _yes(holds: bool) -> str:
    return "holds" if holds else "FAILS"
