"""The steady-state reference: the mean step time of a long run at the fleet's best steady rate,
from the same models as the simulation. A reference, not a bound: a finite window can beat it
(``lower_bound.py`` has the bound, and says why).

Over many steps, each step's rollouts must be trained on and generated:
- the trainer's own time: ``train_s`` per step, plus the weight sync every ``sync.every``
  steps (the trainer waits for it): ``train_s + sync / every``;
- the fleet's time: the step's decode tokens at the best rate the fleet can reach, plus the
  prefill no cache can spare, plus the same sync share when the sync freezes the fleet.
The best decode rate: every in-flight rollout decoding, spread evenly over the replicas
(``b = min(max_inflight / N, max_num_seqs)`` each; a replica's tokens per second ``b / t(b)``
is concave in b, so an even spread is the best one), each step reading the mean context of a
decoding sequence (its prompt plus half its answer, weighted by answer length: longer answers
are in flight longer). The prefill no cache can spare is the one-cache optimum: each group's
shared prefix once, each rollout's own suffix, each later turn's new tokens. Nothing is
preempted, nothing goes stale, no request waits behind another's prefill.
Step time = max(trainer, fleet). Why a window can beat it: the trainer takes groups in
completion order (a window's groups are the short ones; the long ones are still in flight when
it closes), and work done before the window (rollouts under way, groups queued) counts for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.fleet.model import GpuModel, SyncModel, TrainerModel
from benchmarks.fleet.workloads import Workload


@dataclass(frozen=True, slots=True)
class SteadyState:
    step_s: float
    trainer_s: float  # train_s plus the sync's share
    fleet_s: float  # generation, plus the sync's share when it freezes the fleet
    hit_rate: float  # the one-cache optimum
    utilization: float  # the fleet's busy share at this rate


def steady_state(
    workload: Workload,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    samples: int = 400,
) -> SteadyState:
    """The steady-state reference for ``workload`` on ``replicas`` (the module docstring)."""
    G, max_tokens = trainer.group_size, trainer.max_tokens
    decode = 0.0  # tokens per rollout
    weighted_context = 0.0  # sum over answers of answer x (its context mid-answer)
    prefill = 0.0  # uncachable prompt tokens per group
    prompt_total = 0.0
    for group in range(samples):
        prefix = len(workload.group_prefix(group))
        prefill += prefix + G * workload.suffix_tokens
        for rollout in range(G):
            context = prefix + workload.suffix_tokens
            for turn in range(workload.turns):
                answer = workload.answer_tokens(group, rollout, turn, max_tokens)
                decode += answer
                weighted_context += answer * (context + answer / 2)
                prompt_total += context
                context += answer
                if turn + 1 < workload.turns:
                    context += workload.tool_tokens
                    prefill += workload.tool_tokens
    per_rollout = decode / (samples * G)
    mean_context = weighted_context / decode
    b = max(min(trainer.max_inflight / replicas, gpu.max_num_seqs), 1.0)
    step = gpu.step_time(0, round(b), round(b * mean_context))
    rate = replicas * b / step  # decode tokens per second, the whole fleet
    rollouts = trainer.groups_per_step * G
    generate_s = rollouts * per_rollout / rate
    generate_s += gpu.prefill_token_s * (prefill / samples) * trainer.groups_per_step / replicas
    pause = sync.expected_s(replicas) / sync.every
    trainer_s = trainer.train_s + pause
    fleet_s = generate_s + (pause if sync.frozen else 0.0)
    bound = max(trainer_s, fleet_s)
    hit_rate = 1 - prefill / max(prompt_total, 1)
    return SteadyState(bound, trainer_s, fleet_s, hit_rate, generate_s / bound)
