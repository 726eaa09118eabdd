"""The fleet simulation: TRL's AsyncGRPOTrainer sends its rollouts through the proxy's routing
(its real policy objects, reading each request's real body) to simulated vLLM replicas.

- Rollout worker (as TRL's): keeps ``max_inflight`` rollouts going; rollouts come in groups of
  ``group_size`` (consecutive, one prompt); a group's version is the policy version when its
  first rollout starts; each turn's request names the policy version current when it is sent
  (``trl-policy-vN``: a new version is a new prefix-cache namespace on the replicas). As TRL
  1.16's ``_generate_loop``: one rollout per free slot, none while its rollout buffer
  (``queue_maxsize`` samples) and score queue (16 groups) are full. A
  multi-turn rollout sends its next turn ``tool_s`` after an answer, the whole conversation.
- Trainer: a step consumes ``groups_per_step`` whole groups from the queue in completion order,
  dropping groups more than ``max_staleness`` versions old (their tokens are wasted), trains for
  ``train_s``, and every ``sync.every`` steps syncs (``SyncModel.draw``): the trainer waits for
  the whole sync; the fleet pauses (running requests freeze) for it only when the sync is
  ``frozen``; then the version goes up.
- Proxy (``router.py``): per-replica in-flight cap with a FIFO queue, the proxy's own request
  reading, cost estimates and scraped figures, and its pool's membership.
Step time is the time between two optimizer steps' ends, syncs included.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from benchmarks.fleet.engine import Loop, Replica, Request
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.router import Router
from benchmarks.fleet.workloads import Workload
from proxy.routing.policy import Policy

SCORE_QUEUE_GROUPS = 16  # TRL's score_queue_maxsize


@dataclass(slots=True)
class _Group:
    version: int
    done: int = 0
    tokens: int = 0


@dataclass(slots=True)
class FleetRun:
    """What one simulation measured, over the steps after the warm-up."""

    step_times: list[float] = field(default_factory=list)
    wasted_tokens: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    preemptions: int = 0
    busy_s: float = 0.0
    wall_s: float = 0.0
    replicas: int = 0
    requests: int = 0
    warmup: int = 0  # the step whose end opened the window
    window_start_s: float = 0.0  # when it ended
    syncs: dict[int, float] = field(default_factory=dict)  # after step k: its duration, all run

    @property
    def mean_step_s(self) -> float:
        return sum(self.step_times) / len(self.step_times)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / max(self.prompt_tokens, 1)

    @property
    def utilization(self) -> float:
        return self.busy_s / max(self.wall_s * self.replicas, 1e-9)


class Trainer:
    """TRL's AsyncGRPOTrainer: rollout worker, trainer, weight syncs."""

    def __init__(
        self,
        trainer: TrainerModel,
        sync: SyncModel,
        workload: Workload,
        router: Router,
        replicas: list[Replica],
        loop: Loop,
        steps: int,
        warmup: int,
        seed: int,
        name: str = "trl-policy",
    ) -> None:
        self.t = trainer
        self.name = name  # each version's adapter is ``{name}-v{version}``
        self.sync = sync
        self.workload = workload
        self.router = router
        self.replicas = replicas
        self.loop = loop
        self.steps = steps
        self.warmup = warmup
        self.rng = random.Random(seed)
        self.version = 1
        self.step = 0
        self.state = "idle"
        self.queue: deque[_Group] = deque()
        self.groups: dict[int, _Group] = {}
        self.prefixes: dict[int, list[int]] = {}
        self.inflight = 0
        self.next = 0  # rollouts started
        self.uid = 0
        self.last_step_at = 0.0
        self.run = FleetRun(replicas=len(replicas), warmup=warmup)
        self._window: dict[str, float] = {}

    @property
    def finished(self) -> bool:
        return self.step >= self.steps

    def start(self) -> None:
        if not self.warmup:  # the window is the whole run
            self._open_window()
        while self.inflight < self.t.max_inflight:
            self._start_rollout()

    def _start_rollout(self) -> None:
        group, rollout = divmod(self.next, self.t.group_size)
        self.next += 1
        self.inflight += 1
        if rollout == 0:
            self.groups[group] = _Group(self.version)
            self.prefixes[group] = self.workload.group_prefix(group)
        prefix = self.prefixes[group]
        if rollout == self.t.group_size - 1:
            del self.prefixes[group]
        self._send(group, rollout, 0, self.workload.first_prompt(prefix, group, rollout))

    def _send(self, group: int, rollout: int, turn: int, prompt: list[int]) -> None:
        self.uid += 1
        answer = self.workload.answer_tokens(group, rollout, turn, self.t.max_tokens, self.step)
        more = turn + 1 < self.workload.turns
        request = Request(
            self.uid,
            prompt,
            answer,
            f"{self.name}-v{self.version}",
            lambda r: self._answered(r, group, rollout, turn),
            self.workload.answer(group, rollout, turn, answer) if more else None,
        )
        self.run.requests += 1
        self.router.submit(request)

    def _answered(self, request: Request, group: int, rollout: int, turn: int) -> None:
        state = self.groups[group]
        state.tokens += request.answer
        self.run.generated_tokens += request.answer
        if request.answer_ids is not None:  # the conversation goes on
            tool = self.workload.tool_output(group, rollout, turn)
            prompt = request.prompt + request.answer_ids + tool
            when = self.loop.now + self.t.tool_s
            self.loop.at(when, self._send, group, rollout, turn + 1, prompt)
            return
        state.done += 1
        self.inflight -= 1
        if state.done == self.t.group_size:
            del self.groups[group]
            self.queue.append(state)
            self._try_train()
        self._refill()

    def _refill(self) -> None:
        """Free slots get new rollouts unless TRL's buffers are full (``queue_maxsize``)."""
        room = self.t.queue_maxsize + SCORE_QUEUE_GROUPS * self.t.group_size
        while (
            not self.finished
            and self.inflight < self.t.max_inflight
            and len(self.queue) * self.t.group_size < room
        ):
            self._start_rollout()

    def _try_train(self) -> None:
        if self.state != "idle":
            return
        fresh: deque[_Group] = deque()
        for group in self.queue:
            if self.version - group.version <= self.t.max_staleness:
                fresh.append(group)
            elif self.step >= self.warmup:  # dropped as TRL drops a stale sample
                self.run.wasted_tokens += group.tokens
        self.queue = fresh
        if len(fresh) < self.t.groups_per_step:
            self._refill()  # what was dropped made room in TRL's buffer
            return
        for _ in range(self.t.groups_per_step):
            fresh.popleft()
        self._refill()
        self.state = "training"
        self.loop.at(self.loop.now + self.t.train_s, self._trained)

    def _trained(self) -> None:
        now = self.loop.now
        self.step += 1
        if self.step > self.warmup:
            self.run.step_times.append(now - self.last_step_at)
        if self.step == self.warmup:
            self._open_window()
        self.last_step_at = now
        if self.step == self.steps:
            self._close_window()
            return
        if self.step % self.sync.every == 0:
            self.state = "syncing"
            self._pause()
            seconds = self.sync.draw(self.rng, len(self.replicas))
            self.run.syncs[self.step] = seconds
            self.loop.at(now + seconds, self._synced)
        else:
            self.state = "idle"
            self._try_train()

    def _synced(self) -> None:
        self.version += 1
        self.state = "idle"
        self._resume()
        self._try_train()

    def _pause(self) -> None:
        """The sync's pause: a frozen sync stops the whole fleet (``pause?mode=keep``)."""
        if self.sync.frozen:
            for replica in self.replicas:
                replica.pause()

    def _resume(self) -> None:
        if self.sync.frozen:
            for replica in self.replicas:
                replica.resume()

    def _counted(self) -> list[Replica]:
        """The replicas a window's figures add up (a fixed fleet: all of them)."""
        return self.replicas

    def _figures(self) -> dict[str, float]:
        reps = self._counted()
        return {
            "busy": sum(r.busy_s for r in reps),
            "prompt": sum(r.prompt_tokens for r in reps),
            "hit": sum(r.hit_tokens for r in reps),
            "preempt": sum(r.preemptions for r in reps),
            "generated": self.run.generated_tokens,
            "now": self.loop.now,
        }

    def _open_window(self) -> None:
        self._window = self._figures()
        self.run.window_start_s = self.loop.now

    def _close_window(self) -> None:
        end, start = self._figures(), self._window
        run = self.run
        run.busy_s = end["busy"] - start["busy"]
        run.prompt_tokens = int(end["prompt"] - start["prompt"])
        run.hit_tokens = int(end["hit"] - start["hit"])
        run.preemptions = int(end["preempt"] - start["preempt"])
        run.generated_tokens = int(end["generated"] - start["generated"])
        run.wall_s = end["now"] - start["now"]


def simulate(
    policy: Policy,
    *,
    informed: bool,
    workload: Workload,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    proxy: ProxyModel,
    steps: int,
    warmup: int,
    seed: int = 0,
) -> FleetRun:
    """Run ``steps`` training steps; figures cover those after ``warmup``."""
    loop = Loop()
    fleet = [Replica(f"10.0.{i // 250}.{i % 250 + 1}:8000", gpu, loop) for i in range(replicas)]
    router = Router(policy, fleet, informed, proxy, loop, trainer.max_tokens)
    run = Trainer(trainer, sync, workload, router, fleet, loop, steps, warmup, seed)
    run.start()
    loop.run(lambda: run.finished)
    return run.run
