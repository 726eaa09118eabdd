"""In-flight caps, the FIFO queue and 503 + Retry-After, held by a paused replica (no sleeps)."""

from __future__ import annotations

import asyncio

import orjson

from tests.support.calls import completion, post
from tests.support.fleet import run_stack
from tests.support.waiting import eventually, wait_for


async def test_cap_queue_and_503_with_retry_after() -> None:
    async with run_stack(1, max_inflight_per_replica=1, queue_size=1, queue_timeout=30) as stack:
        sim = stack.sims[0]
        # Pause the replica directly: generations wait there, holding the proxy's only slot.
        async with stack.session.post(sim.url + "/pause?mode=keep") as resp:
            assert resp.status == 200
        first = asyncio.create_task(post(stack, "/v1/completions", completion()))
        await wait_for(lambda: stack.pool.total_inflight() == 1, what="first request in flight")
        second = asyncio.create_task(post(stack, "/v1/completions", completion()))
        limiter_status = stack.proxy_url + "/proxy/status"

        async def queued() -> int:
            async with stack.session.get(limiter_status) as resp:
                return int((await resp.json())["queued"])

        async def one_queued() -> bool:
            return await queued() == 1

        await eventually(one_queued, what="the second request queued")
        # The queue is full: a third request is refused at once.
        status, body, headers = await post(stack, "/v1/completions", completion())
        assert status == 503
        assert headers["Retry-After"] == "1"
        assert "queue is full" in orjson.loads(body)["error"]["message"]
        async with stack.session.post(sim.url + "/resume") as resp:
            assert resp.status == 200
        results = await asyncio.gather(first, second)
        assert [status for status, _, _ in results] == [200, 200]
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="slots released")


async def test_queue_timeout_gives_503() -> None:
    async with run_stack(1, max_inflight_per_replica=1, queue_timeout=0.2) as stack:
        sim = stack.sims[0]
        async with stack.session.post(sim.url + "/pause?mode=keep") as resp:
            assert resp.status == 200
        first = asyncio.create_task(post(stack, "/v1/completions", completion()))
        await wait_for(lambda: stack.pool.total_inflight() == 1, what="first request in flight")
        status, body, headers = await post(stack, "/v1/completions", completion())
        assert status == 503
        assert "Retry-After" in headers
        assert "no replica slot became free within 0.2 s" in orjson.loads(body)["error"]["message"]
        async with stack.session.post(sim.url + "/resume") as resp:
            assert resp.status == 200
        assert (await first)[0] == 200


async def test_overall_cap_spreads_over_replicas() -> None:
    async with run_stack(3, max_inflight_per_replica=2, queue_size=100) as stack:
        for sim in stack.sims:
            async with stack.session.post(sim.url + "/pause?mode=keep") as resp:
                assert resp.status == 200
        tasks = [
            asyncio.create_task(post(stack, "/v1/completions", completion())) for _ in range(9)
        ]
        await wait_for(lambda: stack.pool.total_inflight() == 6, what="all slots taken")
        assert sorted(r.inflight for r in stack.pool) == [2, 2, 2]
        for sim in stack.sims:
            async with stack.session.post(sim.url + "/resume") as resp:
                assert resp.status == 200
        results = await asyncio.gather(*tasks)
        assert all(status == 200 for status, _, _ in results)
