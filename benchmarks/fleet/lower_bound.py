"""A lower bound on the mean step time, from the same models as the simulation.

Over many steps, each step's rollouts must be trained on and generated:
- the trainer's own time: ``train_s`` per step, plus the weight sync every ``sync.every``
  steps (the trainer waits for it): ``train_s + sync / every``;
- the fleet's time: the step's decode tokens at the best rate the fleet can reach, plus the
  prefill no cache can spare, plus the same pause (the fleet does not generate while paused).
The best decode rate: every in-flight rollout decoding, spread evenly over the replicas
(``b = min(max_inflight / N, max_num_seqs)`` each; a replica's tokens per second ``b / t(b)``
is concave in b, so an even spread is the best one), each step reading the mean context of a
decoding sequence (its prompt plus half its answer, weighted by answer length: longer answers
are in flight longer). The prefill no cache can spare is the one-cache optimum: each group's
shared prefix once, each rollout's own suffix, each later turn's new tokens. Nothing is
preempted, nothing goes stale, no request waits behind another's prefill.
Step time >= max(trainer, fleet) + pause share. No policy can do better on average; how far a
policy is above it says what its routing costs (imbalance, cache misses, stale waste).
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.fleet.model import GpuModel, SyncModel, TrainerModel
from benchmarks.fleet.workloads import Workload


@dataclass(frozen=True, slots=True)
class Bound:
    step_s: float
    trainer_s: float  # train_s plus the sync's share
    fleet_s: float  # generation plus the sync's share
    hit_rate: float  # the one-cache optimum
    utilization: float  # the fleet's busy share at the bound


def expected_sync_s(sync: SyncModel, replicas: int) -> float:
    """The mean sync time: the slowest of N mount lags, each U(0.8, 1.0) x lag, rounded up
    to the retry interval (its distribution: P(max <= x) = ((x / lag - 0.8) / 0.2) ** N)."""
    if sync.sync_s is not None:
        return sync.sync_s
    if sync.mode == "push":
        load = sync.push_s
    else:
        lag, step = sync.mount_lag_s, sync.retry_s

        def below(x: float) -> float:
            return min(max((x / lag - 0.8) / 0.2, 0.0), 1.0) ** replicas if lag > 0 else 1.0

        load, k = 0.0, 1
        while below((k - 1) * step) < 1.0:
            load += k * step * (below(k * step) - below((k - 1) * step))
            k += 1
    return sync.pause_s + sync.save_s + load + sync.resume_s


def lower_bound(
    workload: Workload,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    sync: SyncModel,
    samples: int = 400,
) -> Bound:
    """The bound for ``workload`` on ``replicas`` (see the module docstring)."""
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
    pause = expected_sync_s(sync, replicas) / sync.every
    trainer_s = trainer.train_s + pause
    fleet_s = generate_s + pause
    bound = max(trainer_s, fleet_s)
    hit_rate = 1 - prefill / max(prompt_total, 1)
    return Bound(bound, trainer_s, fleet_s, hit_rate, generate_s / bound)
