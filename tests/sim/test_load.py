"""The simulated replica's load gauges, counted as vLLM counts them: requests beyond
``--max-num-seqs`` or the KV capacity wait; KV usage is the blocks running requests hold."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from replica_entry.sim import SIM_STATE
from tests.contract.support import parse_metrics
from tests.support.fleet import SimServer
from tests.support.waiting import wait_for


async def _complete(http: aiohttp.ClientSession, url: str, prompt: list[int], **body: Any) -> int:
    async with http.post(url + "/v1/completions", json={"prompt": prompt, **body}) as response:
        return response.status


async def _gauges(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(url + "/metrics") as response:
        return parse_metrics(await response.text(), "sim-model")


async def test_requests_beyond_max_num_seqs_wait_and_are_reported_waiting(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(max_num_seqs=2, gen_token_s=0.02, block_size=16) as (url, app):
        engine = app[SIM_STATE].engine
        tasks = [
            asyncio.create_task(_complete(http, url, list(range(1, 33)), max_tokens=25))
            for _ in range(5)
        ]
        await wait_for(lambda: engine.running == 2 and engine.waiting == 3, 10.0, "a queue")
        gauges = await _gauges(http, url)
        assert gauges["vllm:num_requests_running"] == 2
        assert gauges["vllm:num_requests_waiting"] == 3
        assert gauges["vllm:num_preemptions_total"] == 0
        assert await asyncio.gather(*tasks) == [200] * 5
        assert engine.waiting == engine.running == engine.held_blocks == 0


async def test_kv_usage_counts_the_blocks_running_requests_hold(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    # 10 KV blocks of 16 tokens; each request's 64-token prompt takes 4 blocks, and its answer
    # more as it grows: the third request waits for blocks, though nothing limits the count.
    async with sim_server(kv_blocks=10, gen_token_s=0.02, block_size=16) as (url, app):
        engine = app[SIM_STATE].engine
        tasks = [
            asyncio.create_task(_complete(http, url, list(range(i, i + 64)), max_tokens=30))
            for i in (1, 100, 200)
        ]
        await wait_for(lambda: engine.running == 2 and engine.waiting == 1, 10.0, "full KV")
        gauges = await _gauges(http, url)
        assert gauges["vllm:num_requests_waiting"] == 1
        assert 0.8 <= gauges["vllm:kv_cache_usage_perc"] <= 1.0
        assert await asyncio.gather(*tasks) == [200] * 3
        gauges = await _gauges(http, url)
        assert gauges["vllm:kv_cache_usage_perc"] == 0.0  # cached blocks nobody runs on are free
