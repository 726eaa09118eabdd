"""The error table's rows the fleet and the replicas cause, each provoked through a real proxy on
loopback: no slot, a paused run, no replica, replicas that cannot be reached, are too slow or
refuse a control call or a load, a mount that lags. Each answer is checked against its row and
counted (``tests.support.refusals``); the edge's own rows are in ``test_refusals_edge``, the
proxy out of file descriptors in ``tests/reliability/test_local_limits.py``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from proxy.adapters.calls import LoadLagging, LoadRefused, LoadUnreached
from proxy.dataplane.failures import NoAnswer
from proxy.dataplane.limiter import Rejected
from proxy.fleet.pool import NoReplica
from proxy.http.refusals import ControlRefused, ControlUnreached
from proxy.runs.table import RunPaused
from proxy.upstream.errors import AnswerTimeout
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load, load_body, post
from tests.support.clock import FakeClock
from tests.support.fleet import Stack, run_stack, wait_for
from tests.support.refusals import provokes, refused
from tests.support.scripted import scripted


def refusal(status: int) -> bytes:
    """A replica's whole answer refusing what it was asked, with ``status``."""
    body = b'{"object":"error","message":"no","type":"Error","param":null,"code":%d}' % status
    head = b"HTTP/1.1 %d Refused\r\nContent-Type: application/json\r\n" % status
    return head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


@asynccontextmanager
async def unreachable(**settings: Any) -> AsyncIterator[tuple[Stack, FakeClock]]:
    """A proxy whose one replica is routable but gone: its clock moves only when the test says,
    so no probe notices before a request does."""
    clock = FakeClock()
    async with run_stack(1, clock=clock, **settings) as stack:
        await stack.sims[0].stop()
        yield stack, clock


@provokes(Rejected)
async def test_no_slot_and_no_room_to_wait() -> None:
    slow = {"faults": {"delay_s": 60.0}}
    async with run_stack(1, sim=slow, max_inflight_per_replica=1, queue_size=0) as stack:
        held = asyncio.create_task(post(stack, "/v1/completions", completion()))
        await wait_for(lambda: stack.pool.total_inflight() == 1, what="the one slot taken")
        answer = await post(stack, "/v1/completions", completion())
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await held
        await refused(stack, answer, Rejected, reason="queue_full")


@provokes(RunPaused)
async def test_a_run_paused_past_the_queue_timeout() -> None:
    async with run_stack(1, runs="a", queue_timeout=0.2) as stack:
        await post(stack, "/runs/a/pause", {})
        await refused(stack, await post(stack, "/runs/a/v1/completions", completion()), RunPaused)


@provokes(NoReplica)
async def test_a_control_call_with_no_replica_routable() -> None:
    async with run_stack(1, grace_s=0.0) as stack:
        await stack.sims[0].stop()
        await wait_for(lambda: not stack.pool.routable(), what="the replica ejected")
        await refused(stack, await post(stack, "/reset_prefix_cache", b""), NoReplica)


@provokes(NoAnswer)
async def test_a_generation_no_replica_could_answer() -> None:
    async with unreachable() as (stack, _):
        await refused(stack, await post(stack, "/v1/completions", completion()), NoAnswer)


@provokes(AnswerTimeout)
async def test_a_replica_slower_than_the_request_timeout() -> None:
    async with run_stack(1, request_timeout=0.2, sim={"faults": {"delay_s": 60.0}}) as stack:
        answer = await post(stack, "/v1/completions", completion())
        await refused(stack, answer, AnswerTimeout)


@provokes(ControlUnreached)
async def test_a_control_call_no_replica_could_be_reached_for() -> None:
    async with unreachable() as (stack, _):
        answer = await post(stack, "/reset_prefix_cache", b"")
        error = (await refused(stack, answer, ControlUnreached))["error"]
        assert error["message"] == "no replica could be reached for /reset_prefix_cache"


@provokes(ControlRefused)
async def test_a_control_call_the_replicas_refuse() -> None:
    async with (
        scripted(lambda n: [refusal(500)], replica=True) as replica,
        run_stack(0, extra=(replica.url,)) as stack,
    ):
        answer = await post(stack, "/reset_prefix_cache", b"")
        payload = await refused(stack, answer, ControlRefused, status=500)
        assert [r["status"] for r in payload["replicas"]] == [500]


@provokes(LoadUnreached)
async def test_a_load_no_replica_could_be_reached_for(tmp_path: Path) -> None:
    async with unreachable(adapter_push=False, adapter_load_deadline=0.5) as (stack, clock):
        body = load_body("trl-policy-v1", write_adapter(tmp_path, "trl-policy-v1"))
        loading = asyncio.create_task(load(stack, body))
        # The call failed and ejected the replica; the load answers at its deadline.
        await wait_for(lambda: not stack.pool.routable(), what="the replica ejected")
        clock.advance(5.0)
        payload = await refused(stack, await loading, LoadUnreached)
        assert [r["outcome"] for r in payload["replicas"]] == ["unreachable"]


@provokes(LoadRefused)
async def test_a_load_the_replicas_refuse(tmp_path: Path) -> None:
    async with (
        scripted(lambda n: [refusal(422)], replica=True) as replica,
        run_stack(0, extra=(replica.url,), adapter_push=False) as stack,
    ):
        body = load_body("trl-policy-v1", write_adapter(tmp_path, "trl-policy-v1"))
        payload = await refused(stack, await load(stack, body), LoadRefused, status=422)
        assert [r["outcome"] for r in payload["replicas"]] == ["failed"]


@provokes(LoadLagging)
async def test_a_load_whose_files_never_show(tmp_path: Path) -> None:
    async with run_stack(1, adapter_load_deadline=0.2) as stack:
        answer = await load(stack, load_body("x", tmp_path / "nope"))
        payload = await refused(stack, answer, LoadLagging)
        assert "did not become visible" in payload["error"]["message"]
