"""Prefix routing through the real proxy: groups and conversations stay on one replica."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import orjson

from proxy.dataplane.headers import REPLICA_HEADER, ROUTE_HEADER
from tests.support.calls import metric_value, post
from tests.support.fleet import Stack, run_stack

TEMPLATE = [random.Random(1).randrange(1000) for _ in range(64)]


def rollout(prompt: list[int]) -> dict[str, object]:
    return {"model": "sim-model", "prompt": prompt, "max_tokens": 8, "return_token_ids": True}


async def group(stack: Stack, prompt: list[int], size: int = 8) -> list[tuple[str, list[int]]]:
    results = await asyncio.gather(
        *(post(stack, "/v1/completions", rollout(prompt)) for _ in range(size))
    )
    out = []
    for status, body, headers in results:
        assert status == 200
        out.append((headers[REPLICA_HEADER], orjson.loads(body)["choices"][0]["token_ids"]))
    return out


async def test_groups_and_their_turns_share_a_replica_and_problems_spread() -> None:
    async with run_stack(3) as stack:
        rng = random.Random(2)
        problems = [TEMPLATE + [rng.randrange(1000) for _ in range(48)] for _ in range(40)]
        homes: list[str] = []
        splits = 0
        for index, prompt in enumerate(problems):
            answers = await group(stack, prompt)
            replicas = {replica for replica, _ in answers}
            # Once, while the template is being learned, a group's key changes mid-group.
            splits += len(replicas) > 1
            assert splits <= 1
            homes.append(answers[-1][0])
            if index < 2:
                continue  # the very first prompts are keyed before any template is known
            # Turn 2 of every rollout: the conversation goes back to its replica.
            for replica, answer in answers[-3:]:
                follow = prompt + answer + [rng.randrange(1000) for _ in range(8)]
                status, _, headers = await post(stack, "/v1/completions", rollout(follow))
                assert status == 200
                assert headers[REPLICA_HEADER] == replica
                assert headers[ROUTE_HEADER] in ("affinity", "sticky")
        # After the template is learned, problems spread over the fleet.
        late = Counter(homes[20:])
        assert len(late) == 3
        async with stack.session.get(stack.proxy_url + "/metrics") as resp:
            text = await resp.text()
        assert metric_value(text, 'rollout_proxy_routing_decisions_total{reason="affinity"}') > 0
        assert metric_value(text, 'rollout_proxy_routing_state{kind="templates"}') >= 1


async def test_routing_key_header_overrides_content() -> None:
    async with run_stack(3) as stack:
        rng = random.Random(3)
        seen = set()
        for _ in range(10):
            prompt = [rng.randrange(1000) for _ in range(40)]
            status, _, headers = await post(
                stack, "/v1/completions", rollout(prompt), headers={"X-Session-ID": "conv-42"}
            )
            assert status == 200
            assert headers[ROUTE_HEADER] == "explicit_key"
            seen.add(headers[REPLICA_HEADER])
        assert len(seen) == 1
