"""Token-in generation (``/inference/v1/generate``) through the proxy: keyed by its token ids,
so a group stays together and lands where the same prompt's completions do; failover, caps
and metrics as for completions."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.calls import completion, metric_value, metrics_text, post
from tests.support.fleet import Stack, run_stack

ROUTE = "/inference/v1/generate"


def generate(token_ids: list[int], **params: Any) -> dict[str, Any]:
    sampling = {"max_tokens": 8, "temperature": 1.0, "logprobs": 0, **params}
    return {"model": "sim-model", "token_ids": token_ids, "sampling_params": sampling}


async def group(stack: Stack, token_ids: list[int], size: int = 8) -> set[str]:
    results = await asyncio.gather(*(post(stack, ROUTE, generate(token_ids)) for _ in range(size)))
    assert [status for status, _, _ in results] == [200] * size
    return {headers[REPLICA_HEADER] for _, _, headers in results}


async def test_a_group_stays_together_and_follows_its_completions() -> None:
    async with run_stack(3) as stack:
        rng = random.Random(3)
        homes = set()
        for _ in range(12):
            prompt = [rng.randrange(1000) for _ in range(96)]
            (home,) = await group(stack, prompt)
            homes.add(home)
            status, _, headers = await post(stack, "/v1/completions", completion(prompt=prompt))
            assert status == 200
            assert headers[REPLICA_HEADER] == home
        assert len(homes) > 1  # different prompts spread
        text = await metrics_text(stack)
        assert (
            metric_value(text, 'rollout_proxy_requests_total{route="generate",status="200"}') == 96
        )
        assert metric_value(text, 'rollout_proxy_tokens_total{kind="cached"}') > 0


async def test_token_in_requests_fail_over_and_respect_the_caps() -> None:
    async with run_stack(3, max_inflight_per_replica=2) as stack:
        prompt = list(range(200, 264))
        status, _, headers = await post(stack, ROUTE, generate(prompt))
        assert status == 200
        dead = next(s for s in stack.sims if s.id == headers[REPLICA_HEADER])
        await dead.stop()
        results = await asyncio.gather(*(post(stack, ROUTE, generate(prompt)) for _ in range(8)))
        assert [status for status, _, _ in results] == [200] * 8
        assert all(headers[REPLICA_HEADER] != dead.id for _, _, headers in results)
        alive = [s for s in stack.sims if s.id != dead.id]
        assert max(s.state.engine.max_in_flight for s in alive) <= 2
