"""Several runs on one fleet (issue #25): K trainers share one set of simulated vLLM replicas,
each isolated as the design of ``/runs/<run>`` would isolate it. The proxy side is not built;
this is what that design would do, so that its pay-off can be measured before it is built.

- Each run is TRL's ``AsyncGRPOTrainer`` as in ``sim.py`` (its own ``max_inflight``, groups,
  versions, syncs and ``train_s``), behind one proxy (one ``Router``, one routing policy) in
  front of the same replicas. Its adapters are its own LoRA names (``run<k>-trl-policy-vN``;
  run 0 keeps ``trl-policy``), so its KV hashes are rooted in its own names and no run hits
  another's cache. Its traffic is drawn from its own workload seed (run k: ``seed + k``), so
  the runs' lengths differ and their steps drift apart as real runs' would.
- Per-run pause: a run's frozen sync holds only that run's new requests (first turns and later
  turns alike) in the proxy until its sync ends; its running requests go on (a shared vLLM
  cannot freeze one adapter's sequences), and the other runs go on untouched. A sync that is
  not frozen holds nothing.
- Fair share: each run keeps at most its own ``max_inflight`` going (TRL's rollout worker), and
  the replicas' capacity is shared by batching (vLLM schedules all runs' sequences together,
  its waiting queue first come first served). The proxy's per-replica cap is raised to hold
  every run's in-flight (as ``--what-if`` raises it for one run): no proxy-level queue, so no
  weighted share is modelled there.
- A run that has trained its last step keeps its rollout worker going until every run has, so
  the last runs' windows are not measured on an emptier fleet.
- ``max_loras``: every run's window (``max_staleness + 1`` versions) must fit on each replica
  at once; ``feasible`` says whether it does (the proxy would refuse the load otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from benchmarks.fleet.engine import Loop, Replica
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.router import Router
from benchmarks.fleet.sim import FleetRun, Trainer
from benchmarks.fleet.workloads import Workload
from proxy.routing.policy import Policy

UID_SPAN = 10**12  # request ids per run


def adapter_name(run: int) -> str:
    """Run 0 keeps the single-run name (so one run reproduces ``simulate`` exactly)."""
    return "trl-policy" if run == 0 else f"run{run}-trl-policy"


def loras_needed(runs: int, trainer: TrainerModel) -> int:
    """The ``max_loras`` a replica needs for ``runs`` equal runs on the proxy as built: each
    run's share is ``floor(max_loras / runs)`` and TRL wants ``max_staleness + 2`` of it (its
    window of ``max_staleness + 1``, and the next version loaded before the oldest goes)."""
    return runs * (trainer.max_staleness + 2)


def feasible(runs: int, trainer: TrainerModel, gpu: GpuModel) -> bool:
    """Whether every run's window fits in each replica's ``max_loras``."""
    return loras_needed(runs, trainer) <= gpu.max_loras


class SharedRun(Trainer):
    """One run among several on a shared fleet: its sync holds only its own new requests."""

    def __init__(self, *args: Any, peers: list[SharedRun], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peers = peers  # every run on the fleet, this one included
        self.holding = False
        self.held: list[tuple[int, int, int, list[int]]] = []
        self.sync_spans: list[tuple[float, float]] = []  # (start, end) of each sync
        self.sent_at: list[float] = []  # when each request reached the proxy
        self.answered_at: list[float] = []  # when each request's answer came back

    @property
    def finished(self) -> bool:
        return all(peer.step >= peer.steps for peer in self.peers)

    def _pause(self) -> None:
        self.sync_spans.append((self.loop.now, float("nan")))
        self.holding = self.sync.frozen

    def _resume(self) -> None:
        start, _ = self.sync_spans[-1]
        self.sync_spans[-1] = (start, self.loop.now)
        self.holding = False
        held, self.held = self.held, []
        for group, rollout, turn, prompt in held:
            super()._send(group, rollout, turn, prompt)
            self.sent_at.append(self.loop.now)

    def _send(self, group: int, rollout: int, turn: int, prompt: list[int]) -> None:
        if self.holding:
            self.held.append((group, rollout, turn, prompt))
            return
        super()._send(group, rollout, turn, prompt)
        self.sent_at.append(self.loop.now)

    def _answered(self, request: Any, group: int, rollout: int, turn: int) -> None:
        self.answered_at.append(self.loop.now)
        super()._answered(request, group, rollout, turn)


@dataclass(frozen=True, slots=True)
class Shared:
    """What one shared-fleet simulation measured: each run's figures (``FleetRun``) and the
    runs themselves (their event records)."""

    runs: list[FleetRun]
    trainers: list[SharedRun]


def simulate_shared(
    policy: Policy,
    *,
    informed: bool,
    workload: Workload,
    runs: int,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    steps: int,
    warmup: int,
    seed: int = 0,
) -> Shared:
    """``runs`` runs of ``steps`` training steps each on one fleet of ``replicas``; each run's
    figures cover its own steps after ``warmup`` (utilization: the whole fleet's, over that
    run's window)."""
    loop = Loop()
    fleet = [Replica(f"10.0.{i // 250}.{i % 250 + 1}:8000", gpu, loop) for i in range(replicas)]
    cap = -(-runs * trainer.max_inflight // replicas)
    shared_proxy = replace(proxy, per_replica_cap=max(proxy.per_replica_cap, cap))
    router = Router(policy, fleet, informed, shared_proxy, loop, trainer.max_tokens)
    peers: list[SharedRun] = []
    for k in range(runs):
        own = replace(workload, seed=workload.seed + k)
        run = SharedRun(trainer, sync, own, router, fleet, loop, steps, warmup, seed + k,
                        name=adapter_name(k), peers=peers)  # fmt: skip
        peers.append(run)
    for k, run in enumerate(peers):
        run.uid = k * UID_SPAN  # the proxy and the replicas key requests by uid: one space
        run.start()
    loop.run(lambda: peers[0].finished)
    return Shared([run.run for run in peers], peers)
