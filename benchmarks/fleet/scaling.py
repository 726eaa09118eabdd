"""The product's scaler in the simulated loop: ``deploy.scaler.decide`` called as is, every
``Policy.window_s`` of simulated time, on figures the simulation measures as the run would.

Each evaluation builds a ``Window`` from the window just ended:
- ``waited``: the share of it the trainer spent waiting for samples (``ElasticTrainer``);
- ``verdict``: ``generation-bound`` when the proxy's advisor would say so by its rule 4
  (``proxy.insight.advisor``: in at least ``SATURATED_SHARE`` of its samples, requests queued
  at the proxy for a slot, replicas reported waiting requests, or a replica's KV cache was at
  ``KV_FULL``), from samples taken as its sampler takes them (``SAMPLES`` per window); None
  otherwise (the advisor's other verdicts are not the scaler's to act on here);
- the fleet's ready, starting and draining replicas (``ElasticFleet``);
- ``remaining_s``: the steps left x the mean step of the window (of the last step when none
  ended in it).
Every start-up measured since the last evaluation goes into the decider's ``History``
(``History.started``) first. The decision is applied at once: ``add`` launches (ready after the
start-up), ``retire`` drains (``ElasticFleet.retire``). Cost: O(replicas) per sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.fleet.elastic import ElasticFleet, ElasticRun, ElasticTrainer
from benchmarks.fleet.engine import Loop
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.router import Router
from benchmarks.fleet.workloads import Workload
from deploy.scaler.decide import GENERATION_BOUND, Bounds, History, Window, decide
from deploy.scaler.decide import Policy as ScalerPolicy
from proxy.insight.advisor import SATURATED_SHARE, Sample, figures
from proxy.insight.sampler import SAMPLES
from proxy.routing.policy import Policy


@dataclass(frozen=True, slots=True)
class Scaler:
    """The scaler's settings: the decider's policy and the fleet's bounds."""

    bounds: Bounds
    policy: ScalerPolicy = field(default_factory=ScalerPolicy)


class ScalerLoop:
    """Samples the run for the advisor's rule, and decides every window (module docstring)."""

    def __init__(
        self, scaler: Scaler, fleet: ElasticFleet, trainer: ElasticTrainer, router: Router,
        loop: Loop,
    ) -> None:  # fmt: skip
        self.scaler = scaler
        self.fleet = fleet
        self.trainer = trainer
        self.router = router
        self.loop = loop
        self.history = History()
        self.samples: list[Sample] = []
        self.decisions: list[dict[str, object]] = []
        self._waited = 0.0  # the trainer's wait at the window's start
        self._steps = 0  # steps ended by the window's start
        self._measured = 0  # start-ups already fed to the history

    def start(self) -> None:
        window = self.scaler.policy.window_s
        self.loop.at(window / SAMPLES, self._sample)
        self.loop.at(window, self._evaluate)

    def _sample(self) -> None:
        routable = [c.id for c in self.router.routable]
        replicas = [self.router.replicas[self.router.index[rid]] for rid in routable]
        self.samples.append(
            Sample(
                at=self.loop.now,
                inflight=sum(c.inflight for c in self.router.candidates),
                queued=len(self.router.queue),
                replica_waiting={r.id: float(r.queued()) for r in replicas},
                replica_kv={r.id: r.kv_usage() for r in replicas},
            )
        )
        self.loop.at(self.loop.now + self.scaler.policy.window_s / SAMPLES, self._sample)

    def _evaluate(self) -> None:
        now, policy = self.loop.now, self.scaler.policy
        for seconds in self.fleet.started[self._measured :]:
            self.history = self.history.started(seconds)
        self._measured = len(self.fleet.started)
        waited = self.trainer.waited(now)
        share = min(max((waited - self._waited) / policy.window_s, 0.0), 1.0)
        self._waited = waited
        saturated = figures(self.samples)["saturated_share"] if self.samples else None
        verdict = GENERATION_BOUND if (saturated or 0.0) >= SATURATED_SHARE else None
        self.samples = []
        ends = self.trainer.ends
        recent = ends[self._steps :] if len(ends) > self._steps else ends[-1:]
        self._steps = len(ends)
        step_s = _mean_step(ends, recent)
        left = self.trainer.steps - len(ends)
        ready, starting, draining = self.fleet.counts()
        window = Window(now, share, ready, starting, draining, verdict,
                        left * step_s if step_s is not None else None)  # fmt: skip
        decision = decide(window, self.history, self.scaler.bounds, policy)
        self.history = decision.history
        if decision.action == "add":
            for _ in range(decision.count):
                self.fleet.launch()
        elif decision.action == "retire":
            self.fleet.retire(decision.count)
        self.decisions.append({
            "at_s": now, "step": len(ends), "waited": share, "verdict": verdict,
            "ready": ready, "starting": starting, "draining": draining,
            "action": decision.action, "count": decision.count, "reason": decision.reason,
        })  # fmt: skip
        self.loop.at(now + policy.window_s, self._evaluate)


def _mean_step(ends: list[float], recent: list[float]) -> float | None:
    """The mean step over ``recent`` step ends (the one before them as the first's start)."""
    if not recent:
        return None
    first = ends.index(recent[0])
    before = ends[first - 1] if first else 0.0
    return (recent[-1] - before) / len(recent)


def simulate_elastic(
    policy: Policy, *, informed: bool, workload: Workload, replicas: int, gpu: GpuModel,
    trainer: TrainerModel, sync: SyncModel, proxy: ProxyModel, steps: int, startup_s: float,
    scaler: Scaler | None = None, seed: int = 0,
) -> ElasticRun:  # fmt: skip
    """``steps`` training steps on a fleet that starts with ``replicas`` (ready at 0) and, with
    a ``scaler``, changes as it decides; without one, the fleet stays as it started."""
    loop = Loop()
    fleet = ElasticFleet(gpu, loop, startup_s)
    router = Router(policy, fleet.initial(replicas), informed, proxy, loop, trainer.max_tokens)
    fleet.attach(router)
    run = ElasticTrainer(trainer, sync, workload, router, fleet.live, loop, steps, 0, seed)
    control = ScalerLoop(scaler, fleet, run, router, loop) if scaler is not None else None
    run.start()
    if control is not None:
        control.start()
    loop.run(lambda: run.finished)
    wall = loop.now
    measured = run.run
    return ElasticRun(
        wall_s=wall,
        steps=len(run.ends),
        step_ends=run.ends,
        replica_s=fleet.held_s(wall),
        waited_s=run.waited(wall),
        generated_tokens=measured.generated_tokens,
        wasted_tokens=measured.wasted_tokens,
        hit_rate=measured.hit_rate,
        timeline=fleet.timeline,
        decisions=control.decisions if control is not None else [],
    )
