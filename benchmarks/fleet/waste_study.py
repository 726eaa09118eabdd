"""Can the proxy cut the waste TRL's own in-flight count makes? (issue: rollouts that waste
nothing). ``python -m benchmarks fleet --waste-study [--quick]``.

TRL 1.16 starts one rollout per free slot and stamps a group's version when its first rollout
starts (``async_rollout_worker._generate_loop``: the ``RolloutGroup``'s ``model_version`` is
read when the group's first task is created, before any request leaves), and drops a group more
than ``max_staleness`` versions old. The simulator does the same (``sim.Trainer``). With TRL's
384 in flight on the published shape, 11.7 % of the tokens go to groups it drops. Three things
the proxy could do, each against the best fixed in-flight count TRL could be given:

- ``cap``: the proxy's own per-replica limit below TRL's count (the rest waits in its queue);
- ``cap+age``: the same, its queue ordered oldest group first (the proxy tells a group by its
  routing key, its age by the version of the key's first request) instead of FIFO;
- ``control``: the per-replica limit driven by the stale share the proxy sees
  (``dataplane.rollouts``): every ``CONTROL_S`` it steps down by one group per replica while
  more than ``TARGET`` of the window's rollout tokens were stale, and up while none were and
  requests wait.

The waste is made after the proxy has answered: a finished group waits in TRL's queue behind
the groups before it and is dropped when the trainer reaches it. At answer time neither the
request's version nor its group's has left the window (``proxy_stale_share`` and
``proxy_group_stale_share`` 0 while TRL drops 11.7 %), so the proxy's stale figure is a lower
bound that catches rollouts outliving their version (a slow or hung replica), not this.

Ordering at the replica (vLLM's priority scheduling) is not simulated: on this shape every
request the replica gets runs at once (no waiting queue: ``util`` 1.0, ``queued`` 0), so its
order changes nothing. Nothing the proxy does moves a group's version: holding a request only
makes its group older, which is why none of these beats a smaller count at TRL.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks.fleet.engine import Loop, Replica, Request
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.router import Router
from benchmarks.fleet.sim import FleetRun, Trainer
from benchmarks.fleet.workloads import Workload
from proxy.routing.policy import Policy, RouteRequest
from proxy.routing.prefix import PrefixPolicy

CONTROL_S = 2.0
TARGET = 0.02


class StudyRouter(Router):
    """The simulator's proxy with an ordered queue and a stale-driven limit."""

    def __init__(self, *args: Any, order: str, control: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.order = order
        self.ages: dict[int, tuple[int, int]] = {}  # uid -> (group's version, group)
        self.heap: list[tuple[tuple[int, int], int, Request, RouteRequest]] = []
        self.version: Callable[[], int] = lambda: 1
        self.staleness = 0
        self.window = [0, 0]  # tokens answered, stale, since the last control step
        self.seen = [0, 0]  # the same over the whole run: the stale share the proxy sees
        self.group_seen = [0, 0]  # ... counted by the group's version (its key's first request)
        if control:
            self.loop.at(CONTROL_S, self._control)

    def submit(self, request: Request) -> None:
        if self.order == "fifo":
            super().submit(request)
            return
        route = self.route(request)
        if self.heap or not self._place(request, route):
            age = self.ages.get(request.uid, (0, 0))
            heapq.heappush(self.heap, (age, request.uid, request, route))

    def _answered(self, request: Request, user_done: Any) -> None:
        age = self.ages.pop(request.uid, None)
        stale = self.version() - int(request.lora.rsplit("-v", 1)[1]) > self.staleness
        for tally in (self.window, self.seen):
            tally[0] += request.answer
            tally[1] += request.answer if stale else 0
        old = age is not None and self.version() - age[0] > self.staleness
        self.group_seen[1] += request.answer if old else 0
        super()._answered(request, user_done)
        while self.heap and self._place(self.heap[0][2], self.heap[0][3]):
            heapq.heappop(self.heap)

    def _control(self) -> None:
        tokens, stale = self.window
        self.window = [0, 0]
        cap, step = self.proxy.per_replica_cap, 8
        waiting = bool(self.queue or self.heap)
        if tokens and stale / tokens > TARGET:
            cap = max(cap - step, step)
        elif waiting and not stale:
            cap += step
        self.proxy = replace(self.proxy, per_replica_cap=cap)
        self.loop.at(self.loop.now + CONTROL_S, self._control)


class StudyTrainer(Trainer):
    """TRL's trainer telling the study's proxy each request's group and the group's version
    (what the proxy would learn from the routing key's first request)."""

    def _send(self, group: int, rollout: int, turn: int, prompt: list[int]) -> None:
        router = self.router
        assert isinstance(router, StudyRouter)
        state = self.groups.get(group)
        router.ages[self.uid + 1] = (state.version if state else self.version, group)
        super()._send(group, rollout, turn, prompt)


def simulate_study(
    policy: Policy, *, workload: Workload, replicas: int, gpu: GpuModel, trainer: TrainerModel,
    sync: SyncModel, proxy: ProxyModel, steps: int, warmup: int, order: str, control: bool,
) -> tuple[FleetRun, float, float]:  # fmt: skip
    """The run, and the share of its tokens the proxy saw answered after their version left
    the window (what ``rollout_proxy_stale_tokens_total`` counts), and after their group's
    version (its routing key's first request's) did."""
    loop = Loop()
    fleet = [Replica(f"10.0.0.{i + 1}:8000", gpu, loop) for i in range(replicas)]
    router = StudyRouter(policy, fleet, True, proxy, loop, trainer.max_tokens,
                         order=order, control=control)  # fmt: skip
    run = StudyTrainer(trainer, sync, workload, router, fleet, loop, steps, warmup, 0)
    router.version = lambda: run.version
    router.staleness = trainer.max_staleness
    run.start()
    loop.run(lambda: run.finished)
    total = max(router.seen[0], 1)
    return run.run, router.seen[1] / total, router.group_seen[1] / total


def study(
    workload: Workload, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel,
    proxy: ProxyModel, *, replicas: int, quick: bool,
) -> list[dict[str, Any]]:  # fmt: skip
    """Each variant at TRL's count (``trainer.max_inflight``), and the fixed counts from it down
    to one step's worth, two groups apart."""
    steps, warmup = (12, 3) if quick else (30, 5)
    group = trainer.group_size
    tried: list[tuple[str, int, int, str, bool]] = []
    per_step = trainer.groups_per_step * group
    for inflight in range(trainer.max_inflight, per_step - 1, -2 * group):
        tried.append(("fixed", inflight, max(proxy.per_replica_cap, inflight), "fifo", False))
    limit = -(-(trainer.max_inflight - 6 * group) // replicas)  # the best fixed count's share
    tried += [
        ("cap", trainer.max_inflight, limit, "fifo", False),
        ("cap+age", trainer.max_inflight, limit, "age", False),
        ("control", trainer.max_inflight, -(-trainer.max_inflight // replicas), "fifo", True),
        ("control+age", trainer.max_inflight, -(-trainer.max_inflight // replicas), "age", True),
    ]
    rows = []
    for variant, inflight, cap, order, control in tried:
        run, seen, group_seen = simulate_study(
            PrefixPolicy(), workload=workload, replicas=replicas, gpu=gpu,
            trainer=replace(trainer, max_inflight=inflight), sync=sync,
            proxy=replace(proxy, per_replica_cap=cap), steps=steps, warmup=warmup,
            order=order, control=control,
        )  # fmt: skip
        rows.append({
            "variant": variant, "trl_inflight": inflight, "proxy_cap": cap,
            "step_time_mean_s": run.mean_step_s,
            "wasted_share": run.wasted_tokens / max(run.generated_tokens, 1),
            "proxy_stale_share": seen,
            "proxy_group_stale_share": group_seen,
        })  # fmt: skip
    return rows
