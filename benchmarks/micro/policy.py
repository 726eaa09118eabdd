"""Micro-benchmark of the routing policy alone: microseconds per decision, decisions per second,
and the memory of its tracked state. No sockets: the request body is scanned by the proxy's own
reader, keyed and placed exactly as on the request path.

    python -m benchmarks.policy_bench [--replicas 8] [--decisions 20000]
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.routing.cost import CostModel, decode_budget, estimate_prompt_tokens
from proxy.routing.peek import peek_generation
from proxy.routing.policy import RouteRequest, Snapshot
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
    """Time peek + keys + (cost estimate and) select over ``decisions`` distinct prompts of
    ``tokens`` tokens."""
    fleet = [_Replica(f"10.0.0.{i}:8000") for i in range(replicas)]
    members = tuple(r.id for r in fleet)
    policy = PrefixPolicy()
    bodies = _bodies(tokens, 512, template=min(tokens // 2, 2000), seed=seed)
    for body in bodies[:128]:  # warm-up: learn the template
        peek = peek_generation(body, b"prompt")
        keys, hint = policy.route_keys(peek, "x")
        policy.select(
            Snapshot(fleet, members), RouteRequest("trl-policy-v7", None, keys, hint=hint)
        )
    peek_s = key_s = select_s = 0.0
    clock = time.perf_counter
    costs = CostModel()
    for i in range(decisions):
        body = bodies[i % len(bodies)]
        t0 = clock()
        peek = peek_generation(body, b"prompt")
        t1 = clock()
        keys, hint = policy.route_keys(peek, "trl-policy-v7")
        t2 = clock()
        # What the handler adds per request: the cost estimate, then the decision.
        budget = decode_budget(peek)
        cost = costs.estimate(estimate_prompt_tokens(peek), budget)
        route = RouteRequest("trl-policy-v7", None, keys, cost, budget, hint)
        policy.select(Snapshot(fleet, members), route)
        t3 = clock()
        peek_s, key_s, select_s = peek_s + t1 - t0, key_s + t2 - t1, select_s + t3 - t2
    total = peek_s + key_s + select_s
    return {
        "tokens": tokens,
        "replicas": replicas,
        "decisions": decisions,
        "us_per_decision": 1e6 * total / decisions,
        "us_peek": 1e6 * peek_s / decisions,
        "us_keys": 1e6 * key_s / decisions,
        "us_select": 1e6 * select_s / decisions,
        "decisions_per_s": decisions / total,
    }


def state_memory(prompts: int, max_tracked: int = 65_536) -> dict[str, Any]:
    """Bytes held by the policy after ``prompts`` distinct prompts (tracemalloc)."""
    from proxy.routing.settings import PrefixSettings

    policy = PrefixPolicy(PrefixSettings(max_tracked=max_tracked))
    fleet = [_Replica(f"10.0.0.{i}:8000") for i in range(8)]
    members = tuple(r.id for r in fleet)
    head = b'{"model": "m", "prompt": [' + b", ".join(b"%d" % i for i in range(64)) + b", "
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    for i in range(prompts):
        body = head + b"%d, %d, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]}" % (i, i * 7)
        peek = peek_generation(body, b"prompt")
        # Keep every request "busy" on its first preference so spills and sticky keys happen.
        fleet[i % 8].inflight = (i * 13) % 40
        keys, hint = policy.route_keys(peek, "m")
        policy.select(Snapshot(fleet, members), RouteRequest("m", None, keys, hint=hint))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"prompts": prompts, "bytes": held - base, **policy.stats()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.policy_bench")
    parser.add_argument("--replicas", type=int, default=8)
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
