"""A replica that hangs (accepts, never answers): its requests end at the request timeout, or are
answered by another replica once it is ejected; the loop lives."""

from __future__ import annotations

import asyncio
import time

from tests.support.calls import completion, post
from tests.support.fleet import run_stack
from tests.support.waiting import wait_for


async def test_a_hanging_replica_s_requests_end_at_the_timeout_and_the_loop_lives() -> None:
    """Health does not eject it here (its probes time out after 30 s): a request on it ends at
    the request timeout, the loop serving everything else meanwhile."""
    async with run_stack(
        2, relays=True, policy="least_loaded", request_timeout=1.0, health_timeout=30.0
    ) as stack:
        hung = stack.pool.routable()[0]  # least-loaded ties go here
        stack.relays[0].freeze()
        started = time.monotonic()
        stuck = asyncio.create_task(post(stack, "/v1/completions", completion()))
        await wait_for(lambda: hung.inflight == 1, what="request on the hung replica")
        # The event loop keeps serving while the replica hangs.
        for path in ("/health", "/metrics", "/proxy/status"):
            probe_started = time.monotonic()
            async with stack.session.get(stack.proxy_url + path) as resp:
                assert resp.status == 200
            assert time.monotonic() - probe_started < 0.5
        status, body, _ = await stuck
        assert status == 504
        assert b"did not answer within 1 s" in body
        assert 0.9 < time.monotonic() - started < 3.0
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="no slot leaked")
        stack.relays[0].thaw()


async def test_a_hanging_replica_is_ejected_and_its_request_answered_by_another() -> None:
    async with run_stack(
        2, relays=True, policy="least_loaded", request_timeout=30.0, health_timeout=0.2
    ) as stack:
        hung = stack.pool.routable()[0]
        stack.relays[0].freeze()
        started = time.monotonic()
        stuck = asyncio.create_task(post(stack, "/v1/completions", completion()))
        await wait_for(lambda: hung.inflight == 1, what="request on the hung replica")
        status, _, headers = await stuck
        assert status == 200  # at the ejection, not the 30 s request timeout
        assert headers["X-Rollout-Replica"] != hung.id
        assert time.monotonic() - started < 3.0
        assert hung not in stack.pool.routable()
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="no slot leaked")
        stack.relays[0].thaw()
        await wait_for(lambda: hung in stack.pool.routable(), what="readmission after the hang")
