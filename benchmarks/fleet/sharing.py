"""The sharing comparison (issue #25): K runs on one fleet of M replicas against K runs each on
its own fleet of R replicas, in GPU-hours per run-step and step time per run.

R and each run's ``max_inflight`` are what ``--what-if`` recommends for one run of the same
trainer shape (the fewest replicas within 5 % of the best step; ``separate`` overrides R), and
every run in both layouts keeps that in-flight count. GPUs: each run's trainer holds
``trainer_gpus`` (the published run's h200x2) in either layout; each replica is one GPU. A
layout's GPU-seconds per run-step is its GPUs over the run-steps it makes per second (the sum
over runs of 1 / mean step). Both layouts are simulated with the same per-run pause
(``runs.py``): the separate fleet is the shared path with one run, so sharing is the only
difference. A layout whose runs' windows do not fit in ``max_loras`` is not simulated and is
reported infeasible, as the proxy would refuse its loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks import report
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.runs import feasible, loras_needed, simulate_shared
from benchmarks.fleet.whatif import what_if
from benchmarks.fleet.workloads import Workload
from proxy.routing.prefix import PrefixPolicy

RUNS = (2, 4, 8)
PAYS_GPU = 0.75  # at least 25 % fewer GPU-hours per run-step ...
PAYS_STEP = 1.2  # ... at no more than 1.2 x the step time


def gpu_s_per_run_step(trainer_gpus: int, replicas: int, step_times: list[float]) -> float:
    """GPU-seconds per run-step of a fleet of ``replicas`` serving one run per mean step time
    given, each run with its own ``trainer_gpus``."""
    gpus = trainer_gpus * len(step_times) + replicas
    return gpus / sum(1.0 / s for s in step_times)


def _window(quick: bool) -> tuple[int, int]:
    """(steps, warm-up): ``--what-if``'s."""
    return (12, 3) if quick else (30, 5)


def _simulate(
    workload: Workload,
    runs: int,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    quick: bool,
) -> dict[str, Any]:
    steps, warmup = _window(quick)
    shared = simulate_shared(PrefixPolicy(), informed=True, workload=workload, runs=runs,
                             replicas=replicas, gpu=gpu, trainer=trainer, sync=sync, proxy=proxy,
                             steps=steps, warmup=warmup)  # fmt: skip
    times = [run.mean_step_s for run in shared.runs]
    wasted = sum(run.wasted_tokens for run in shared.runs)
    generated = sum(run.generated_tokens for run in shared.runs)
    return {
        "step_times_s": times,
        "step_time_mean_s": sum(times) / len(times),
        "step_time_max_s": max(times),
        "utilization": sum(run.utilization for run in shared.runs) / len(times),
        "tokens_per_replica_s": sum(r.generated_tokens / r.wall_s for r in shared.runs) / replicas,
        "wasted_share": wasted / max(generated, 1),
    }


def baseline(
    workload: Workload,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    *,
    quick: bool,
    separate: int | None = None,
    max_replicas: int = 8,
) -> tuple[TrainerModel, int, dict[str, Any]]:
    """One run on its own fleet: (the trainer with the advisor's in-flight count, R, figures)."""
    if separate is None:
        _, pick = what_if(workload, gpu, trainer, sync, proxy, max_replicas=max_replicas,
                          quick=quick)  # fmt: skip
        separate = int(pick["replicas"])
        trainer = replace(trainer, max_inflight=int(pick["max_inflight_tasks"]))
    alone = _simulate(workload, 1, separate, _fit(gpu, 1, trainer), trainer, sync, proxy, quick)
    return trainer, separate, alone


def _fit(gpu: GpuModel, runs: int, trainer: TrainerModel) -> GpuModel:
    """The replica with ``max_loras`` raised to what the layout needs (as its operator would
    set vLLM's ``--max-loras``)."""
    return replace(gpu, max_loras=max(gpu.max_loras, loras_needed(runs, trainer)))


def layout(
    label: str,
    workload: Workload,
    runs: int,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    *,
    quick: bool,
    separate: int,
    alone: dict[str, Any],
    trainer_gpus: int,
    fit_loras: bool,
) -> dict[str, Any]:
    """K runs on M replicas against K separate fleets of ``separate`` replicas (``alone``: one
    of them, measured). ``fit_loras``: raise ``max_loras`` to the need, else hold it as given."""
    gpu = _fit(gpu, runs, trainer) if fit_loras else gpu
    row: dict[str, Any] = {
        "config": label,
        "runs": runs,
        "replicas": replicas,
        "separate_replicas": separate,
        "max_inflight": trainer.max_inflight,
        "loras_needed": loras_needed(runs, trainer),
        "max_loras": gpu.max_loras,
        "feasible": feasible(runs, trainer, gpu),
        "separate_step_s": alone["step_time_mean_s"],
        "separate_gpu_s_per_run_step": gpu_s_per_run_step(
            trainer_gpus, separate, [alone["step_time_mean_s"]]
        ),
        "separate_utilization": alone["utilization"],
        "separate_tokens_per_replica_s": alone["tokens_per_replica_s"],
        "separate_wasted_share": alone["wasted_share"],
    }
    if not row["feasible"]:
        return row
    got = _simulate(workload, runs, replicas, gpu, trainer, sync, proxy, quick)
    gpu_s = gpu_s_per_run_step(trainer_gpus, replicas, got["step_times_s"])
    step_ratio = got["step_time_max_s"] / alone["step_time_mean_s"]
    gpu_ratio = gpu_s / row["separate_gpu_s_per_run_step"]
    row.update(got)
    row.update(
        gpu_s_per_run_step=gpu_s,
        gpu_hours_per_run_step=gpu_s / 3600,
        separate_gpu_hours_per_run_step=row["separate_gpu_s_per_run_step"] / 3600,
        gpu_ratio=gpu_ratio,
        step_ratio=step_ratio,
        pays=gpu_ratio <= PAYS_GPU and step_ratio <= PAYS_STEP,
    )
    return row


def grid(
    configs: dict[str, TrainerModel],
    workload: Workload,
    gpu: GpuModel,
    sync: SyncModel,
    proxy: ProxyModel,
    *,
    runs: tuple[int, ...] = RUNS,
    sizes: tuple[int, ...] = tuple(range(1, 9)),
    quick: bool,
    separate: int | None = None,
    trainer_gpus: int = 2,
    fit_loras: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Every (config, K, M) layout against its config's separate fleets."""
    rows = []
    for label, trainer in configs.items():
        shape, r, alone = baseline(workload, gpu, trainer, sync, proxy, quick=quick,
                                   separate=separate)  # fmt: skip
        progress(f"{label}: separate fleets of {r}, {alone['step_time_mean_s']:.2f} s")
        for k in runs:
            for m in sizes:
                rows.append(layout(label, workload, k, m, gpu, shape, sync, proxy, quick=quick,
                                   separate=r, alone=alone, trainer_gpus=trainer_gpus,
                                   fit_loras=fit_loras))  # fmt: skip
                done = rows[-1]
                got = f"{done['gpu_ratio']:.2f} x GPU" if done["feasible"] else "infeasible"
                progress(f"{label} K={k} M={m}: {got}")
    return rows


SHARING_COLUMNS = {
    "config": "published (the flags given) or trainer_bound (train_s doubled)",
    "K": "runs sharing the fleet",
    "M": "the shared fleet's replicas",
    "R": "each separate fleet's replicas (what-if's pick unless --separate-replicas)",
    "inflight": "each run's max_inflight (what-if's pick, both layouts)",
    "loras": "adapters per replica the layout needs (K x (max_staleness + 1))",
    "step_s": "the slowest run's mean step on the shared fleet (s)",
    "sep_step_s": "one run's mean step on its own fleet of R (s)",
    "step_x": "step_s / sep_step_s",
    "gpu_h_x1000": "GPU-hours per run-step x 1000: (K x trainer GPUs + M) / run-steps per hour",
    "sep_gpu_h_x1000": "the same for separate fleets: (trainer GPUs + R) x sep_step_s",
    "gpu_x": "gpu_h_x1000 / sep_gpu_h_x1000",
    "tok_s": "tokens generated per replica-second, all runs, over their windows",
    "sep_tok_s": "the same on a separate fleet",
    "util": "the fleet's busy share (a replica with any work counts as busy)",
    "sep_util": "the same on a separate fleet",
    "wasted": "share of generated tokens dropped as stale, all runs",
    "sep_wasted": "the same on a separate fleet",
    "pays": f"gpu_x <= {PAYS_GPU} and step_x <= {PAYS_STEP}; infeasible: the runs' windows"
    " exceed max_loras (the proxy would refuse the load)",
}
SHARING_HEADERS = list(SHARING_COLUMNS)
SHARING_LEGEND = "\n".join(f"{name}: {what}" for name, what in SHARING_COLUMNS.items())


def sharing_table(rows: list[dict[str, Any]]) -> str:
    """One line per layout (``SHARING_LEGEND`` names the columns)."""
    lines = []
    for r in rows:
        head = [r["config"], r["runs"], r["replicas"], r["separate_replicas"], r["max_inflight"],
                r["loras_needed"]]  # fmt: skip
        sep = 1000 * r["separate_gpu_s_per_run_step"] / 3600
        if not r["feasible"]:
            lines.append([*head, "-", r["separate_step_s"], "-", "-", sep, "-", "-",
                          r["separate_tokens_per_replica_s"], "-", r["separate_utilization"], "-",
                          r["separate_wasted_share"],
                          "infeasible"])  # fmt: skip
            continue
        lines.append([*head, r["step_time_max_s"], r["separate_step_s"], r["step_ratio"],
                      1000 * r["gpu_hours_per_run_step"], sep, r["gpu_ratio"],
                      r["tokens_per_replica_s"], r["separate_tokens_per_replica_s"],
                      r["utilization"], r["separate_utilization"], r["wasted_share"],
                      r["separate_wasted_share"],
                      "yes" if r["pays"] else "no"])  # fmt: skip
    return report.table(SHARING_HEADERS, lines)
