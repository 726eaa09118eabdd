"""Overload: ten times the cap at once. Queue, then 503 + Retry-After; nothing lost or stuck."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.support.calls import completion, post
from tests.support.fleet import run_stack
from tests.support.waiting import wait_for


async def test_ten_times_the_cap() -> None:
    # 2 replicas x 4 slots, 8 queued; each generation takes ~0.2 s.
    async with run_stack(
        2, sim={"gen_token_s": 0.025}, max_inflight_per_replica=4, queue_size=8, queue_timeout=30
    ) as stack:
        results = await asyncio.gather(
            *(post(stack, "/v1/completions", completion()) for _ in range(80))
        )
        statuses = Counter(status for status, _, _ in results)
        assert set(statuses) <= {200, 503}
        assert statuses[200] >= 16  # every slot and every queue place was used
        assert statuses[503] > 0
        for status, _, headers in results:
            if status == 503:
                assert headers["Retry-After"] == "1"
        completed = sum(
            1 for s in stack.sims for r in s.state.records if r.path == "/v1/completions"
        )
        assert completed == statuses[200]  # every accepted request reached a replica, once
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="slots released")
        async with stack.session.get(stack.proxy_url + "/proxy/status") as resp:
            status_page = await resp.json()
        assert (status_page["inflight"], status_page["queued"]) == (0, 0)
        # And the proxy serves normally afterwards.
        assert (await post(stack, "/v1/completions", completion()))[0] == 200
