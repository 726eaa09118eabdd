"""Routing quality without sockets: replay a GRPO trace through a policy, in simulated time.

The model, event by event:
- ``concurrency`` rollout slots, like TRL's ``max_inflight_tasks``: a slot takes the next
  rollout (groups of G, in order) and runs its turns one after another;
- each request is encoded as TRL sends it (JSON, token ids) and read back with the proxy's own
  scanner and the policy's own key builder, then placed by ``policy.select``;
- each replica has a vLLM-like prefix cache (LRU of chained 16-token block hashes, finite);
  a request's duration grows with its uncached prompt tokens, its generated tokens and the
  replica's batch; after it, the prompt and the generated tokens are cached on that replica.
Reported: realized cache hit rate (tokens), the best possible for the trace (one cache as large
as the fleet's caches together, seeing every request: what perfect sharing would reach), max/mean
requests per replica, and the policy's reasons.
Membership changes (a replica leaving or joining at a given request count) are supported.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field

import orjson

from benchmarks.harness.trace import TraceShape, build_groups, next_prompt, rollout_order
from proxy.routing.facts import Facts
from proxy.routing.policy import Decision, Policy, Snapshot
from replica_entry.sim.prefix_cache import PrefixCache

MODEL = "trl-policy-v1"


@dataclass(frozen=True, slots=True)
class SimConfig:
    replicas: int = 3
    concurrency: int = 96
    cache_blocks: int = 4096  # per replica, 16-token blocks
    block_size: int = 16
    prompt_token_s: float = 0.00005
    gen_token_s: float = 0.004
    overhead_s: float = 0.002
    batch_factor: float = 0.01
    leave_at: int | None = None  # request count at which the last replica leaves
    join_at: int | None = None  # request count at which an extra replica joins
    per_replica_cap: int = 128


@dataclass(slots=True)
class _Replica:
    id: str
    cache: PrefixCache
    inflight: int = 0
    served: int = 0
    cost: float = 0.0  # no cost estimates here: the policies balance request counts
    reported: None = None


@dataclass(slots=True)
class RoutingResult:
    policy: str
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    best_cached_tokens: int = 0
    served: dict[str, int] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)
    group_replicas: list[int] = field(default_factory=list)  # distinct replicas per group, turn 1

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / max(self.prompt_tokens, 1)

    @property
    def best_rate(self) -> float:
        return self.best_cached_tokens / max(self.prompt_tokens, 1)

    @property
    def max_mean(self) -> float:
        counts = list(self.served.values())
        return max(counts) / (sum(counts) / len(counts)) if counts else 0.0

    @property
    def spill_rate(self) -> float:
        return self.reasons["spill"] / max(self.requests, 1)


class _Run:
    def __init__(self, policy: Policy, shape: TraceShape, config: SimConfig) -> None:
        self.policy, self.shape, self.config = policy, shape, config
        self.facts = Facts(policy)  # every request weighs the same: this measures affinity
        self.replicas = [self._new_replica(i) for i in range(config.replicas)]
        # The best possible: one cache as large as the whole fleet's, seeing every request.
        self.best = PrefixCache(config.block_size, config.cache_blocks * config.replicas)
        self.result = RoutingResult(policy.name)
        self.rng = random.Random(shape.seed + 1)
        self.group_sets: dict[int, set[str]] = {}

    def _new_replica(self, index: int) -> _Replica:
        return _Replica(
            f"10.0.0.{index + 1}:8000",
            PrefixCache(self.config.block_size, self.config.cache_blocks),
        )

    def members(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.replicas)

    def route(self, prompt: list[int]) -> _Replica:
        body = orjson.dumps(
            {
                "model": MODEL,
                "prompt": prompt,
                "max_tokens": self.shape.max_tokens,
                "temperature": 1.0,
                "n": 1,
                "return_token_ids": True,
                "logprobs": 0,
            }
        )
        request = self.facts.build(body, b"prompt")  # the proxy's own path (routing.facts)
        cap = self.config.per_replica_cap
        candidates = [r for r in self.replicas if r.inflight < cap] or self.replicas
        decision: Decision = self.policy.select(Snapshot(candidates, self.members()), request)
        self.result.reasons[decision.reason] += 1
        return next(r for r in self.replicas if r.id == decision.replica_id)

    def serve(self, replica: _Replica, prompt: list[int], answer: list[int]) -> float:
        """Account one request on ``replica``; return its duration in simulated seconds."""
        cached = replica.cache.query(MODEL, prompt)
        self.result.best_cached_tokens += self.best.query(MODEL, prompt)
        replica.cache.insert(MODEL, prompt + answer)
        self.best.insert(MODEL, prompt + answer)
        self.result.requests += 1
        self.result.prompt_tokens += len(prompt)
        self.result.cached_tokens += cached
        replica.served += 1
        c = self.config
        work = c.overhead_s + (len(prompt) - cached) * c.prompt_token_s
        work += len(answer) * c.gen_token_s
        return work * (1 + c.batch_factor * replica.inflight)

    def membership(self) -> None:
        count = self.result.requests
        if self.config.leave_at is not None and count == self.config.leave_at:
            self.replicas.pop()
        if self.config.join_at is not None and count == self.config.join_at:
            self.replicas.append(self._new_replica(len(self.replicas) + 10))


def simulate(policy: Policy, shape: TraceShape, config: SimConfig) -> RoutingResult:
    """Replay ``shape``'s trace through ``policy`` on ``config``'s simulated fleet."""
    run = _Run(policy, shape, config)
    groups = build_groups(shape)
    rollouts = rollout_order(groups, shape)
    # Event heap: (finish time, sequence, slot state); a slot state is the rollout in progress.
    events: list[tuple[float, int, tuple[int, int, list[int], _Replica, list[int]]]] = []
    seq = 0
    next_rollout = 0

    def start(now: float, index: int, turn: int, prompt: list[int]) -> None:
        nonlocal seq
        run.membership()
        replica = run.route(prompt)
        if turn == 0:
            run.group_sets.setdefault(rollouts[index][0].index, set()).add(replica.id)
        answer = [run.rng.randrange(shape.vocab) for _ in range(shape.max_tokens)]
        duration = run.serve(replica, prompt, answer)
        replica.inflight += 1
        seq += 1
        heapq.heappush(events, (now + duration, seq, (index, turn, prompt, replica, answer)))

    while next_rollout < min(config.concurrency, len(rollouts)):
        group, i = rollouts[next_rollout]
        start(0.0, next_rollout, 0, group.first_prompt(i))
        next_rollout += 1
    while events:
        now, _, (index, turn, prompt, replica, answer) = heapq.heappop(events)
        replica.inflight -= 1
        group, _ = rollouts[index]
        if turn + 1 < shape.turns:
            start(now, index, turn + 1, next_prompt(prompt, answer, group.follow_ups[turn]))
        elif next_rollout < len(rollouts):
            group, i = rollouts[next_rollout]
            start(now, next_rollout, 0, group.first_prompt(i))
            next_rollout += 1
    run.result.served = {r.id: r.served for r in run.replicas}
    run.result.group_replicas = [len(ids) for ids in run.group_sets.values()]
    return run.result
