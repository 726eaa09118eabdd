"""``python -m benchmarks fleet --elastic [--quick]``: the product's scaler against fixed fleets
on runs whose completion lengths change during the run (issue 50).

The scenario (``FULL``; every model constant is still a flag):
- the published trainer shape (16 groups of 8 per step, a sync every 2 steps, ``train_s`` 3.5,
  long-tailed math reasoning) with this project's sync (as ``--what-if``), 500 steps;
- completion lengths times a factor of the step (``workloads.Lengths``): growing linearly to 3x
  over the run, shrinking to 1/3, or constant. At factor 1 every length is the published
  shape's (median 614 tokens, cut at 2,048); TRL's ``max_tokens`` is 3 x 2,048, so grown
  lengths are not cut (a run that expects them sets its completion length for them);
- a replica starts in 240 s; fleets of 1..6 replicas; no budget; the decider's defaults;
- deploy's prices (``deploy.prices``, ``deploy.plan.Flavors``): a replica is the published
  run's flavour (h200: 1 GPU, $5/h), the trainer the fixed part (h200x2: 2 GPUs, $10/h);
- TRL's in-flight count is fixed when the trainer starts. A fixed fleet of N gets the what-if's
  count for N at the first step's shape; the scaler starts at the what-if's recommendation
  with the what-if's count for that fleet (``scaler``), or for the largest or the smallest
  fleet allowed (``scaler, count for N``). On the constant run it also starts at 1 and at 6.
Each figure covers the whole run, 0 to the last step. GPU-hours: the replicas' GPU time held
(launch to gone) plus the trainer's GPUs over the wall time (it holds them, waiting or not: a
fleet too small pays in trainer-hours, which replica-hours alone would hide, always favouring
the smallest fleet); the objective is GPU-hours per trained step.

The acceptance, computed (``acceptance``): on the growing run the scaler's wall time within 5 %
of the fastest fixed fleet's, and its GPU-hours per step at or under those of every fixed fleet
within that wall time; on the shrinking run fewer GPU-hours than the fixed fleet it starts as;
on the constant run it settles on the what-if's fleet (ready over the last quarter of the run,
nothing starting or draining) from each start. ``QUICK`` is the same on 40 steps, 1..3
replicas and the decider's times divided by 6 (for tests; its checks are computed, not held).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from benchmarks.fleet.elastic import ElasticRun
from benchmarks.fleet.elastic_rows import Prices, acceptance, row
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.scaling import Scaler, simulate_elastic
from benchmarks.fleet.whatif import Costs, recommend, what_if
from benchmarks.fleet.workloads import WORKLOADS, Lengths, Workload
from deploy.scaler.decide import Bounds
from deploy.scaler.decide import Policy as ScalerPolicy
from proxy.routing.prefix import PrefixPolicy

SHAPES = {"growing": 3.0, "shrinking": 1 / 3, "constant": 1.0}  # the length factor at the end


@dataclass(frozen=True, slots=True)
class Scenario:
    steps: int
    startup_s: float
    min_replicas: int
    max_replicas: int
    policy: ScalerPolicy
    jobs: int  # simulations at once (processes)


FULL = Scenario(500, 240.0, 1, 6, ScalerPolicy(), jobs=2)
_DEFAULT = ScalerPolicy()
QUICK = Scenario(
    40, 40.0, 1, 3,
    replace(_DEFAULT, window_s=10.0, sustain_s=30.0, cooldown_s=50.0, startup_s=50.0,
            failed_backoff_s=150.0),
    jobs=1,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Leg:
    """One run of the study: a workload shape, a fleet and TRL's count."""

    shape: str
    label: str
    replicas: int  # at the start
    count: int  # TRL's max_inflight_tasks
    scaled: bool


@dataclass(frozen=True, slots=True)
class Setting:
    """What every leg shares."""

    workload: Workload
    gpu: GpuModel
    trainer: TrainerModel
    sync: SyncModel
    proxy: ProxyModel
    scenario: Scenario
    prices: Prices


def published(trainer: TrainerModel, steps: int) -> tuple[TrainerModel, Workload]:
    """The trainer's shape (the published one by default) with ``max_tokens`` tripled, and
    ``long_tail`` with its lengths in tokens at the given ``max_tokens`` (median 0.3 x it, cut
    at it): factor 1 is the published lengths, factor 3 fits."""
    base = trainer.max_tokens
    median, sigma = WORKLOADS["long_tail"].decode_params
    workload = replace(WORKLOADS["long_tail"], decode_params=(median * base, sigma),
                       decode_cap=base, lengths=Lengths(1.0, steps))  # fmt: skip
    return replace(trainer, max_tokens=3 * base), workload


def simulate_leg(leg: Leg, setting: Setting) -> ElasticRun:
    """One leg, start to end (a module function: the process pool runs it)."""
    scenario = setting.scenario
    workload = replace(setting.workload, lengths=Lengths(SHAPES[leg.shape], scenario.steps))
    floor = scenario.min_replicas if leg.scaled else leg.replicas
    # As --what-if: the proxy's cap holds TRL's whole count on the smallest fleet the run has.
    cap = max(setting.proxy.per_replica_cap, -(-leg.count // floor))
    bounds = Bounds(scenario.min_replicas, scenario.max_replicas, setting.prices.replica_per_h,
                    setting.prices.trainer_per_h)  # fmt: skip
    return simulate_elastic(
        PrefixPolicy(), informed=True, workload=workload, replicas=leg.replicas,
        gpu=setting.gpu, trainer=replace(setting.trainer, max_inflight=leg.count),
        sync=setting.sync, proxy=replace(setting.proxy, per_replica_cap=cap),
        steps=scenario.steps, startup_s=scenario.startup_s,
        scaler=Scaler(bounds, scenario.policy) if leg.scaled else None,
    )  # fmt: skip


def legs(start: int, counts: dict[int, int], scenario: Scenario) -> list[Leg]:
    top, bottom = scenario.max_replicas, scenario.min_replicas
    out = []
    for shape in SHAPES:
        out += [Leg(shape, f"fixed {n}", n, counts[n], False) for n in range(bottom, top + 1)]
        out.append(Leg(shape, "scaler", start, counts[start], True))
        for n in (top, bottom):
            if counts[n] != counts[start]:
                out.append(Leg(shape, f"scaler, count for {n}", start, counts[n], True))
    for n in (bottom, top):
        if n != start:
            out.append(Leg("constant", f"scaler from {n}", n, counts[start], True))
    return out


def study(
    gpu: GpuModel, trainer: TrainerModel, sync: SyncModel, proxy: ProxyModel, *, quick: bool,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:  # fmt: skip
    """The what-if at the first step's shape, then every leg; rows and the acceptance."""
    scenario = QUICK if quick else FULL
    shape, workload = published(trainer, scenario.steps)
    prices = Prices.deploy()
    costs = Costs(prices.replica_gpus, prices.trainer_gpus)
    rows, pick = what_if(workload, gpu, shape, sync, proxy, max_replicas=scenario.max_replicas,
                         quick=quick, costs=costs)  # fmt: skip
    sizes = range(scenario.min_replicas, scenario.max_replicas + 1)
    counts = {
        n: int(recommend([r for r in rows if r["replicas"] == n], costs)["max_inflight_tasks"])
        for n in sizes
    }
    start = int(pick["replicas"])
    progress(
        f"what-if: {start} replicas, {pick['max_inflight_tasks']} in flight; per size {counts}"
    )
    setting = Setting(workload, gpu, shape, sync, proxy, scenario, prices)
    planned = legs(start, counts, scenario)
    runs = []
    for leg, run in zip(planned, _simulate_all(planned, setting), strict=True):
        runs.append(row(leg.shape, leg.label, leg.replicas, leg.count, run, prices))
        progress(f"{leg.shape} {leg.label}: {runs[-1]['wall_min']:.1f} min")
    return {
        "scenario": {**asdict(scenario), "shapes": SHAPES, "trainer": asdict(shape),
                     "workload": workload.name, "prices": asdict(prices)},
        "what_if": {"replicas": start, "max_inflight_tasks": pick["max_inflight_tasks"],
                    "step_time_mean_s": pick["step_time_mean_s"], "counts": counts},
        "rows": runs,
        "acceptance": acceptance(runs, start),
    }  # fmt: skip


def _simulate_all(planned: list[Leg], setting: Setting) -> Iterator[ElasticRun]:
    """Each leg's run, in order; ``jobs`` at once in processes (each leg is independent)."""
    jobs = setting.scenario.jobs
    if jobs <= 1:
        yield from (simulate_leg(leg, setting) for leg in planned)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from pool.map(simulate_leg, planned, [setting] * len(planned))
