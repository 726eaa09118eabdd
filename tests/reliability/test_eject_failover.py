"""Requests waiting on a replica that is ejected (here: it hangs, and health ejects it) are sent
to another replica at the ejection, not left to the request timeout; the hung one's generation
is cancelled (its connection closed), so nothing is served twice."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.support.calls import completion, post
from tests.support.fleet import run_stack
from tests.support.waiting import wait_for

REQUESTS = 12
ANSWER_BOUND_S = 10.0  # far below the 60 s request timeout; room for a busy machine


async def test_requests_on_a_replica_ejected_under_them_are_answered_by_another() -> None:
    settings: dict[str, Any] = {
        "policy": "least_loaded",
        "request_timeout": 60.0,
        "health_timeout": 0.3,
    }
    async with run_stack(2, relays=True, **settings) as stack:
        hung = stack.pool.get(stack.relays[0].url.split("//", 1)[1])
        other = stack.relays[1].url.split("//", 1)[1]
        assert hung is not None
        stack.relays[0].freeze()
        started = time.monotonic()
        calls = [asyncio.create_task(post(stack, "/v1/completions", completion()))
                 for _ in range(REQUESTS)]  # fmt: skip
        await wait_for(lambda: hung.inflight > 0, what="requests on the hung replica")
        answers = await asyncio.wait_for(asyncio.gather(*calls), ANSWER_BOUND_S)
        assert time.monotonic() - started < ANSWER_BOUND_S
        assert [status for status, _, _ in answers] == [200] * REQUESTS
        assert {headers["X-Rollout-Replica"] for _, _, headers in answers} == {other}
        assert not hung.routable
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="no slot leaked")
        stack.relays[0].thaw()
