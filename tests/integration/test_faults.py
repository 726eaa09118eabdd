"""Replica faults seen through the proxy: drops before and after the first byte, and metrics."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.calls import completion, metric_value, post, records
from tests.support.fleet import run_stack
from tests.support.waiting import eventually, wait_for


async def test_dropped_buffered_answer_fails_over() -> None:
    # A non-streamed answer is read whole before the client sees a byte, so a replica that
    # drops the connection half-way is retried elsewhere, and ejected at --gateway-failures
    # such failures in a row (here 2; one is load, not death).
    sims = [{"faults": {"drop_mid_response": True}}, {}]
    # Least-loaded sends each request to the first (faulty) replica first.
    async with run_stack(sims=sims, policy="least_loaded", gateway_failures=2) as stack:
        for sent in (1, 2):
            status, _, headers = await post(stack, "/v1/completions", completion())
            assert status == 200
            assert headers[REPLICA_HEADER] == stack.sims[1].id
            ejected = stack.sims[0].id not in {r.id for r in stack.pool.routable()}
            assert ejected is (sent == 2)


async def test_stream_dropped_after_first_byte_ends_incomplete() -> None:
    async with run_stack(1, sim={"faults": {"drop_mid_response": True}}) as stack:
        async with stack.session.post(
            stack.proxy_url + "/v1/completions", json=completion(stream=True)
        ) as resp:
            assert resp.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="slot released")
        # The proxy keeps serving: the fault is cleared and the replica comes back.
        async with stack.session.post(
            stack.sims[0].url + "/sim/faults", json={"drop_mid_response": False}
        ) as resp:
            assert resp.status == 200
        await wait_for(lambda: len(stack.pool.routable()) == 1, what="readmission")
        assert (await post(stack, "/v1/completions", completion()))[0] == 200


async def test_a_client_leaving_mid_stream_cancels_the_generation_not_the_replica(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with run_stack(1, sim={"gen_token_s": 0.05}) as stack:
        body = completion(stream=True, max_tokens=200)  # a 10 s stream
        async with stack.session.post(stack.proxy_url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            assert (await resp.content.readline()).startswith(b"data: ")
            resp.close()  # the client goes with the answer half read

        async def cancelled() -> bool:
            return any(r.get("cancelled") for r in await records(stack, 0))

        await eventually(cancelled, what="the replica to see the stream cancelled")
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="slot released")
        assert [r.id for r in stack.pool.routable()] == [stack.sims[0].id]
        assert (await post(stack, "/v1/completions", completion()))[0] == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_a_lone_replicas_5xx_reaches_the_client() -> None:
    async with run_stack(1, sim={"faults": {"fail_status": 500}}) as stack:
        status, body, _ = await post(stack, "/v1/completions", completion())
        assert status == 500
        assert b"Simulated failure" in body


async def test_metrics_describe_the_traffic() -> None:
    async with run_stack(2) as stack:
        await asyncio.gather(*(post(stack, "/v1/completions", completion()) for _ in range(10)))
        await post(stack, "/v1/completions", b"{bad")
        async with stack.session.get(stack.proxy_url + "/metrics") as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
        ok = 'rollout_proxy_requests_total{route="completions",status="200"}'
        assert metric_value(text, ok) == 10
        assert metric_value(text, 'rollout_proxy_rejections_total{reason="bad_request"}') == 1
        assert metric_value(text, 'rollout_proxy_tokens_total{kind="prompt"}') == 10 * 64
        assert metric_value(text, 'rollout_proxy_tokens_total{kind="cached"}') > 0
        for sim in stack.sims:
            assert f'rollout_proxy_replica_healthy{{replica="{sim.id}"}} 1.0' in text
        assert metric_value(text, 'rollout_proxy_replicas{state="healthy"}') == 2
        assert metric_value(text, 'rollout_proxy_overhead_seconds_count{route="completions"}') == 10
        async with stack.session.get(stack.proxy_url + "/proxy/status") as resp:
            status = await resp.json()
        assert [r["id"] for r in status["replicas"]] == [s.id for s in stack.sims]
        assert status["inflight"] == 0
        assert all(r["state"] == "healthy" for r in status["replicas"])
