"""Routing that sees the replicas: a replica reporting a queue or a full KV cache on its
/metrics gets no new work while another can take it, though its keys hash to it."""

from __future__ import annotations

import asyncio
from typing import Any

import xxhash

from proxy.dataplane.headers import REPLICA_HEADER, ROUTE_HEADER
from proxy.routing.hashring import DEFAULT_VNODES, HashRing
from tests.support.calls import completion, metric_value, post
from tests.support.fleet import Sim, Stack, run_stack, wait_for

SCRAPE: dict[str, Any] = {"load_interval": 0.02, "load_stale": 5.0, "waiting_high": 3}


def keys_owned_by(stack: Stack, sim: Sim, count: int) -> list[str]:
    """Routing-key header values whose ring owner is ``sim``."""
    ring = HashRing(stack.pool.ids, DEFAULT_VNODES)
    found: list[str] = []
    i = 0
    while len(found) < count:
        key = f"session-{i}"
        if ring.first(xxhash.xxh64_intdigest(key.encode())) == sim.id:
            found.append(key)
        i += 1
    return found


async def send(stack: Stack, key: str, **body: Any) -> tuple[str, str]:
    status, _, headers = await post(
        stack, "/v1/completions", completion(**body), headers={"X-Routing-Key": key}
    )
    assert status == 200
    return headers[REPLICA_HEADER], headers[ROUTE_HEADER]


async def test_a_replica_reporting_a_queue_gets_no_new_work() -> None:
    async with run_stack(2, **SCRAPE) as stack:
        busy, free = stack.sims
        keys = keys_owned_by(stack, busy, 13)
        # The busy replica stops running (paused behind the proxy's back): what it is sent queues.
        async with stack.session.post(busy.url + "/pause?mode=keep") as resp:
            assert resp.status == 200
        stuck = [asyncio.create_task(send(stack, key)) for key in keys[:3]]
        await wait_for(lambda: busy.state.engine.waiting == 3, what="a queue on the replica")
        replica = stack.pool.get(busy.id)
        assert replica is not None
        await wait_for(
            lambda: replica.reported is not None and replica.reported.saturated,
            what="the proxy to see the queue",
        )
        # Its keys' new requests go to the other replica and are answered while it is stuck.
        placed = await asyncio.wait_for(
            asyncio.gather(*(send(stack, key) for key in keys[3:])), timeout=30
        )
        assert {replica_id for replica_id, _ in placed} == {free.id}
        assert {reason for _, reason in placed} == {"spill"}
        async with stack.session.get(stack.proxy_url + "/metrics") as resp:
            text = await resp.text()
        series = f'rollout_proxy_replica_reported{{kind="saturated",replica="{busy.id}"}}'
        assert metric_value(text, series) == 1.0
        async with stack.session.get(stack.proxy_url + "/proxy/status") as resp:
            status = await resp.json()
        shown = next(r for r in status["replicas"] if r["id"] == busy.id)
        assert shown["reported"]["saturated"] is True
        assert shown["reported"]["waiting"] >= 3
        async with stack.session.post(busy.url + "/resume") as resp:
            assert resp.status == 200
        assert {replica_id for replica_id, _ in await asyncio.gather(*stuck)} == {busy.id}


async def test_a_replica_reporting_a_full_kv_cache_gets_no_new_work() -> None:
    # The busy replica's KV holds 8 blocks of 16 tokens; one long conversation fills it.
    sims = [{"kv_blocks": 8, "gen_token_s": 0.02}, {"gen_token_s": 0.0}]
    async with run_stack(sims=sims, **SCRAPE) as stack:
        busy, free = stack.sims
        keys = keys_owned_by(stack, busy, 11)
        long_prompt = list(range(1, 121))  # 8 blocks once it has generated a few tokens
        holder = asyncio.create_task(send(stack, keys[0], prompt=long_prompt, max_tokens=1000))
        replica = stack.pool.get(busy.id)
        assert replica is not None
        await wait_for(
            lambda: replica.reported is not None and replica.reported.kv_usage >= 0.9,
            timeout=10.0,
            what="the proxy to see the KV cache full",
        )
        assert replica.reported is not None and replica.reported.saturated
        placed = await asyncio.gather(*(send(stack, key) for key in keys[1:]))
        assert {replica_id for replica_id, _ in placed} == {free.id}
        # End the long generation (vLLM's abort), so the test does not wait for it.
        async with stack.session.post(busy.url + "/pause?mode=abort") as resp:
            assert resp.status == 200
        async with stack.session.post(busy.url + "/resume") as resp:
            assert resp.status == 200
        assert (await holder)[0] == busy.id
