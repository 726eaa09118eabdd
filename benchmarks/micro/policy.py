"""Micro-benchmark of the routing policy alone: microseconds per decision, decisions per second,
and the memory of its tracked state. No sockets: the request body is scanned by the proxy's own
reader, keyed and placed exactly as on the request path.

    python -m benchmarks.micro.policy [--replica-count 8] [--decisions 20000]
"""

from __future__ import annotations

import random
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.config.deprecated import DeprecatedNames
from proxy.config.programs import OneLineParser
from proxy.routing.cost import CostModel
from proxy.routing.facts import Facts
from proxy.routing.peek import peek_generation
from proxy.routing.policy import Snapshot
from proxy.routing.prefix import PrefixPolicy


@dataclass
class _Replica:
    id: str
    inflight: int = 0
    cost: float = 0.0
    reported: None = None


def _bodies(tokens: int, count: int, template: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    shared = [rng.randrange(150_000) for _ in range(template)]
    bodies = []
    for _ in range(count):
        prompt = shared + [rng.randrange(150_000) for _ in range(tokens - template)]
        bodies.append(
            orjson.dumps(
                {
                    "model": "trl-policy-v7",
                    "prompt": prompt,
                    "max_tokens": 256,
                    "temperature": 1.0,
                    "n": 1,
                    "return_token_ids": True,
                    "logprobs": 0,
                }
            )
        )
    return bodies


def measure(tokens: int, replicas: int, decisions: int, seed: int = 0) -> dict[str, Any]:
    """Time the routing facts (``routing.facts``: peek, keys, cost estimate) and the decision
    over ``decisions`` distinct prompts of ``tokens`` tokens. ``us_peek`` is the peek alone,
    timed in a pass of its own; ``us_keys`` the rest of the facts (keys and cost estimate)."""
    fleet = [_Replica(f"10.0.0.{i}:8000") for i in range(replicas)]
    members = tuple(r.id for r in fleet)
    policy = PrefixPolicy()
    facts = Facts(policy, CostModel())
    bodies = _bodies(tokens, 512, template=min(tokens // 2, 2000), seed=seed)
    for body in bodies[:128]:  # warm-up: learn the template
        policy.select(Snapshot(fleet, members), facts.build(body, b"prompt"))
    clock = time.perf_counter
    t0 = clock()
    for i in range(decisions):
        peek_generation(bodies[i % len(bodies)], b"prompt")
    peek_s = clock() - t0
    facts_s = select_s = 0.0
    for i in range(decisions):
        t0 = clock()
        route = facts.build(bodies[i % len(bodies)], b"prompt")
        t1 = clock()
        policy.select(Snapshot(fleet, members), route)
        t2 = clock()
        facts_s, select_s = facts_s + t1 - t0, select_s + t2 - t1
    total = facts_s + select_s
    return {
        "tokens": tokens,
        "replicas": replicas,
        "decisions": decisions,
        "us_per_decision": 1e6 * total / decisions,
        "us_peek": 1e6 * peek_s / decisions,
        "us_keys": 1e6 * max(facts_s - peek_s, 0.0) / decisions,
        "us_select": 1e6 * select_s / decisions,
        "decisions_per_s": decisions / total,
    }


def state_memory(prompts: int, max_tracked: int = 65_536) -> dict[str, Any]:
    """Bytes held by the policy after ``prompts`` distinct prompts (tracemalloc)."""
    from proxy.routing.settings import PrefixSettings

    policy = PrefixPolicy(PrefixSettings(max_tracked=max_tracked))
    facts = Facts(policy)
    fleet = [_Replica(f"10.0.0.{i}:8000") for i in range(8)]
    members = tuple(r.id for r in fleet)
    head = b'{"model": "m", "prompt": [' + b", ".join(b"%d" % i for i in range(64)) + b", "
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    for i in range(prompts):
        body = head + b"%d, %d, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]}" % (i, i * 7)
        # Keep every request "busy" on its first preference so spills and sticky keys happen.
        fleet[i % 8].inflight = (i * 13) % 40
        policy.select(Snapshot(fleet, members), facts.build(body, b"prompt"))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"prompts": prompts, "bytes": held - base, **policy.stats()}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m benchmarks.micro.policy")
    parser.add_argument(
        "--replica-count",
        "--replicas",
        action=DeprecatedNames,
        deprecated={"--replicas": "--replicas is a list of replica URLs in rollout-proxy"},
        dest="replicas",
        type=int,
        default=8,
    )
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--memory-prompts", type=int, default=200_000)
    args = parser.parse_args(argv)
    print(f"{'tokens':>7} {'us/decision':>12} {'peek':>7} {'keys':>7} {'select':>7} {'dec/s':>9}")
    for tokens in (1000, 4000):
        row = measure(tokens, args.replicas, args.decisions)
        print(
            f"{tokens:>7} {row['us_per_decision']:>12.2f} {row['us_peek']:>7.2f} "
            f"{row['us_keys']:>7.2f} {row['us_select']:>7.2f} {row['decisions_per_s']:>9.0f}"
        )
    memory = state_memory(args.memory_prompts)
    print(
        f"state after {memory['prompts']} distinct prompts: {memory['bytes'] / 1e6:.1f} MB "
        f"({memory['tracked_prefixes']} tracked prefixes, {memory['sticky_keys']} sticky keys)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
