"""A lower bound on a simulated run's mean step time: what no routing of the same rollouts can
beat, given the trainer's time, the syncs the run drew and the fleet's throughput.

A run measures the window from the end of step W (``warmup``, at time T(W)) to the end of step
S; its mean step is (T(S) - T(W)) / (S - W). The bound holds for any schedule that opens the
window when the run did (T(W) is the run's own): work done before it can count for it, and how
much is bounded by the fleet's throughput since time 0, so the bound is stated on T(S).

- **Trainer.** The trainer is serial and waits for every sync: T(S) - T(W) >= (S - W) x
  ``train_s`` + the syncs after steps W..S-1 (the run's own draws, ``FleetRun.syncs``).
- **Fleet.** Step j starts once its groups and all earlier steps' are complete: j x
  ``groups_per_step`` groups. For every j in the window, T(S) >= start(j) + (S - j + 1) x
  ``train_s`` + the syncs after steps j..S-1, and start(j) >= the least *active* time the fleet
  needs for those groups + the frozen syncs before step j (when the sync freezes the fleet;
  each less one step, which may run on into a freeze). The bound is the largest of these.

What those groups cost (``demand``): rollouts start in order (groups 0, 1, ...; every length
is the rollout's own, whatever the routing), so the j x G consumed groups lie among the first
j x G + m started, where m <= ``max_inflight`` groups are still unfinished at start(j) (each
holds an in-flight rollout). Tokens, context read and prefill are counted over the cheapest
such choice, each relaxed on its own: the j x G smallest groups of the first j x G + m, and at
least all of them less the ``max_inflight`` largest rollouts; an unfinished rollout counts 0.
Per request: L answer tokens (the first from its prefill step), context read L x P + L(L-1)/2
(P its prompt), prefill tokens at least what no cache can hold: a first turn's tokens past the
hittable whole blocks of its group's prefix (the last token always recomputed), the group's
own prefix blocks once (the template's blocks may be shared across groups), a later turn's
tool output. Preemption, stale drops and cache misses only add work.

What the fleet can do in active time A (``fleet_seconds``): a replica's step with s sequences
lasts at least ``step_s + seq_s s`` + its prefill and context cost, and yields at most s
tokens; steps run one at a time per replica, at most ``max_inflight`` sequences run at once in
the fleet and at most min(``max_num_seqs``, the proxy's cap) on one replica. So, over K steps
giving X tokens with extra work E (prefill and context): (1) N x A >= step_s K + seq_s X + E
(busy time), (2) max_inflight x A >= step_s X + seq_s X^2 / K + E (sequence-seconds: each
running sequence holds an in-flight slot for its step; Cauchy-Schwarz on the s_i^2). A is the
least over K of the larger of the two (a quadratic in K), K within [X / cap, X].

Not assumed: that groups are consumed in completion order, that the cache keeps what it can,
that the proxy queues nothing, that replicas are balanced. Assumed, as in the simulation: the
step-time model (``GpuModel.step_time``), one token per running sequence per step, the
rollout worker's start order, and distinct groups' problems sharing no whole block.
Cost: O((S x groups_per_step + max_inflight) x G log) per window step, once per grid cell.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from benchmarks.fleet.model import GpuModel, SyncModel, TrainerModel
from benchmarks.fleet.sim import FleetRun
from benchmarks.fleet.workloads import Workload


@dataclass(frozen=True, slots=True)
class Demand:
    """What the fleet must have done before the trainer can start each step."""

    active_s: dict[int, float]  # step j -> least active fleet seconds before it can start
    step_max_s: float  # the longest one replica step can last (one may run into a freeze)


@dataclass(frozen=True, slots=True)
class Bound:
    """Per step of the window: the bound, its trainer term and its fleet term."""

    step_s: float
    trainer_s: float
    fleet_s: float


@dataclass(slots=True)
class _Rollouts:
    tokens: list[list[int]]  # per group, per rollout: answer tokens, all turns
    context: list[list[float]]  # per group, per rollout: context tokens read
    prefill: list[float]  # per group: prefill tokens no cache can spare
    max_context: int


def _rollouts(workload: Workload, trainer: TrainerModel, groups: int, block: int) -> _Rollouts:
    G, max_tokens = trainer.group_size, trainer.max_tokens
    shared_blocks = workload.template_tokens // block  # the same in every group
    out = _Rollouts([], [], [], 0)
    for group in range(groups):
        prefix = len(workload.group_prefix(group))
        first = prefix + workload.suffix_tokens
        hittable = min((first - 1) // block, prefix // block)
        prefill = G * (first - hittable * block) + block * max(hittable - shared_blocks, 0)
        tokens, context = [], []
        for rollout in range(G):
            prompt, made, read = first, 0, 0.0
            for turn in range(workload.turns):
                answer = workload.answer_tokens(group, rollout, turn, max_tokens)
                made += answer
                read += answer * prompt + answer * (answer - 1) / 2
                out.max_context = max(out.max_context, prompt + answer)
                prompt += answer
                if turn + 1 < workload.turns:
                    prompt += workload.tool_tokens
                    prefill += max(workload.tool_tokens, 1)
            tokens.append(made)
            context.append(read)
        out.tokens.append(tokens)
        out.context.append(context)
        out.prefill.append(prefill)
    return out


def least_cost(groups: list[float], rollouts: list[list[float]], n: int, parked: int) -> float:
    """A lower bound on the cost of ``n`` whole groups taken from the first ``n + m`` started
    (``m`` <= ``parked``), when at most ``parked`` rollouts can be left unfinished (cost 0):
    min over m of max(the n cheapest of the n + m, all n + m less the ``parked`` dearest
    rollouts among them). Both terms are lower bounds; the first falls with m, the second
    rises. ``rollouts`` empty: the first term alone."""
    cheapest = [-g for g in groups[:n]]  # a max-heap of the n cheapest so far
    heapq.heapify(cheapest)
    kept = sum(groups[:n])
    total = kept
    dearest = heapq.nlargest(parked, (r for g in rollouts[:n] for r in g))
    heapq.heapify(dearest)  # a min-heap of the `parked` dearest rollouts
    top = sum(dearest)
    best = max(kept, total - top) if rollouts else kept
    for m in range(1, min(parked, len(groups) - n) + 1):
        cost = groups[n + m - 1]
        total += cost
        kept += cost + heapq.heappushpop(cheapest, -cost)
        for r in rollouts[n + m - 1] if rollouts else ():
            if len(dearest) < parked:
                heapq.heappush(dearest, r)
                top += r
            elif r > dearest[0]:
                top += r - heapq.heapreplace(dearest, r)
        best = min(best, max(kept, total - top) if rollouts else kept)
    return best


def fleet_seconds(
    tokens: float, extra_s: float, replicas: int, inflight: int, cap: int, gpu: GpuModel
) -> float:
    """The least active time in which ``replicas`` can generate ``tokens`` and do ``extra_s``
    of prefill and context work (the module docstring, constraints (1) and (2))."""
    N, B, a, b = replicas, inflight, gpu.step_s, gpu.seq_s
    if tokens <= 0:
        return extra_s / N
    X, E = tokens, extra_s

    def busy(K: float) -> float:
        return (a * K + b * X + E) / N

    def held(K: float) -> float:
        return (a * X + b * X * X / K + E) / B

    # busy(K) = held(K): B a K^2 + (B b X + (B - N) E - N a X) K - N b X^2 = 0
    qa, qb, qc = B * a, B * b * X + (B - N) * E - N * a * X, -N * b * X * X
    K = (-qb + math.sqrt(qb * qb - 4 * qa * qc)) / (2 * qa)
    K = min(max(K, X / max(min(cap, B), 1)), X)
    return max(busy(K), held(K))


def demand(
    workload: Workload,
    replicas: int,
    gpu: GpuModel,
    trainer: TrainerModel,
    cap: int,
    steps: range,
) -> Demand:
    """``Demand.active_s`` for each step in ``steps``; ``cap``: the proxy's per-replica cap."""
    inflight = trainer.max_inflight
    per_replica = min(gpu.max_num_seqs, cap)
    n_max = max(steps) * trainer.groups_per_step
    r = _rollouts(workload, trainer, n_max + inflight, gpu.block_size)
    tokens = [float(sum(g)) for g in r.tokens]
    context = [sum(g) for g in r.context]
    as_float = [[float(t) for t in g] for g in r.tokens]
    active = {}
    for j in steps:
        n = j * trainer.groups_per_step
        X = least_cost(tokens, as_float, n, inflight)
        read = least_cost(context, r.context, n, inflight)
        prefill = least_cost(r.prefill, [], n, inflight)
        extra = gpu.kv_token_s * read + gpu.prefill_token_s * prefill
        active[j] = fleet_seconds(X, extra, replicas, inflight, per_replica, gpu)
    step_max = gpu.step_time(gpu.max_num_batched_tokens, per_replica, per_replica * r.max_context)
    return Demand(active, step_max)


def window_bound(run: FleetRun, need: Demand, trainer: TrainerModel, sync: SyncModel) -> Bound:
    """The bound on ``run``'s mean step (the module docstring); ``need`` from ``demand`` for
    the run's window steps (warm-up + 1 .. last)."""
    W = run.warmup
    S = W + len(run.step_times)
    syncs = run.syncs
    train = trainer.train_s
    window = (S - W) * train + sum(d for k, d in syncs.items() if W <= k < S)
    fleet = 0.0
    for j in range(W + 1, S + 1):
        frozen = sum(max(d - need.step_max_s, 0.0) for k, d in syncs.items() if k < j)
        start = need.active_s[j] + (frozen if sync.frozen else 0.0)
        after = (S - j + 1) * train + sum(d for k, d in syncs.items() if j <= k < S)
        fleet = max(fleet, start + after - run.window_start_s)
    steps = S - W
    return Bound(max(window, fleet) / steps, window / steps, fleet / steps)
