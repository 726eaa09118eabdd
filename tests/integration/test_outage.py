"""No routable replica for longer than the grace: a request is answered 503 at once, naming the
replicas' reasons, instead of waiting the queue timeout; within the grace it waits as before.
A request queued before the fleet (or every replica of its model) went out is answered so when
the grace ends, not after the queue timeout blaming slots."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from proxy.fleet.replica import Replica
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load_body
from tests.support.fleet import Stack, run_sim, run_stack
from tests.support.servers import free_port
from tests.support.waiting import wait_for

PROBES = {"health_interval": 0.05, "health_timeout": 0.5}
ANSWER_BOUND_S = 10.0  # far below the refused case's 30 s queue timeout; room for a busy machine


@asynccontextmanager
async def unreachable_fleet(grace_s: float, **settings: Any) -> AsyncIterator[tuple[str, Replica]]:
    """A proxy whose one replica is a closed port, once its first probe has failed."""
    url = f"http://127.0.0.1:{free_port()}"
    app = build_app(
        Settings.model_validate({"replicas": [url], **PROBES, **settings}),
        no_replica_grace_s=grace_s,
    )
    async with serve(app) as proxy_url:
        replica = next(iter(app[PROXY].fleet.pool))
        await wait_for(lambda: replica.last_error != "", what="the first failed probe")
        yield proxy_url, replica


async def ask(proxy_url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        post = session.post(proxy_url + "/v1/completions", json=completion())
        async with post as resp:
            return resp.status, orjson.loads(await resp.read())


async def test_past_the_grace_a_request_is_refused_at_once_with_the_reasons(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy")
    async with unreachable_fleet(0.0, queue_timeout=30) as (proxy_url, replica):
        for _ in range(2):
            status, body = await asyncio.wait_for(ask(proxy_url), ANSWER_BOUND_S)
            assert status == 503
            assert body["error"]["message"] == (
                f"no replica is ready: {replica.url} (probe failed: connection refused); "
                "retry when /health answers 200"
            )
        async with aiohttp.ClientSession() as session, session.get(proxy_url + "/metrics") as r:
            assert b'rollout_proxy_rejections_total{reason="no_replica"} 2.0' in await r.read()
    said = [r.getMessage() for r in caplog.records if "answered 503 at once" in r.getMessage()]
    assert len(said) == 1  # once per outage, not per request


async def test_within_the_grace_a_request_waits_for_a_replica() -> None:
    async with unreachable_fleet(3600.0, queue_timeout=0.2) as (proxy_url, _):
        status, body = await asyncio.wait_for(ask(proxy_url), ANSWER_BOUND_S)
    assert status == 503
    assert body["error"]["message"] == "no replica slot became free within 0.2 s"


async def test_a_fleet_with_no_replica_says_so() -> None:
    app = build_app(Settings.model_validate({}), no_replica_grace_s=0.0)
    async with serve(app) as proxy_url:
        status, body = await asyncio.wait_for(ask(proxy_url), ANSWER_BOUND_S)
    assert status == 503
    assert body["error"]["message"].startswith("no replica is configured;")


async def test_the_outage_ends_when_a_replica_is_admitted() -> None:
    """... and a request that queues behind a busy replica is not refused (only an outage is)."""
    async with unreachable_fleet(0.0, max_inflight_per_replica=1) as (proxy_url, replica):
        assert (await ask(proxy_url))[0] == 503
        port = int(replica.url.rsplit(":", 1)[1])
        async with run_sim(port=port, faults={"delay_s": 0.2}):
            await wait_for(lambda: replica.routable, ANSWER_BOUND_S, "the replica admitted")
            answers = await asyncio.wait_for(
                asyncio.gather(ask(proxy_url), ask(proxy_url)), ANSWER_BOUND_S
            )
    assert [status for status, _ in answers] == [200, 200], answers


async def test_trl_s_load_waits_out_a_blip_and_is_refused_in_an_outage(tmp_path: Path) -> None:
    """TRL does not retry a load: one that arrives while the fleet is dark for less than the
    grace (a replica being readmitted, a restarted proxy's first probes) is carried out once a
    replica is admitted, not answered 503; past the grace it is refused."""
    adapter = write_adapter(tmp_path, "v1")
    fleet = unreachable_fleet(3600.0)
    async with fleet as (proxy_url, replica), aiohttp.ClientSession() as session:

        async def call(path: str, body: Any = None) -> int:
            async with session.post(proxy_url + path, json=body) as resp:
                return resp.status

        load = asyncio.create_task(call("/v1/load_lora_adapter", load_body("v1", adapter)))
        failed = replica.standing.fail_streak
        await wait_for(lambda: replica.standing.fail_streak >= failed + 2, what="two probes")
        assert not load.done()  # waiting, not refused
        port = int(replica.url.rsplit(":", 1)[1])
        async with run_sim(port=port) as sim:
            assert await asyncio.wait_for(load, ANSWER_BOUND_S) == 200
            assert "v1" in sim.state.adapters
    async with unreachable_fleet(0.0) as (proxy_url, _), aiohttp.ClientSession() as session:
        body = load_body("v1", adapter)
        post = session.post(proxy_url + "/v1/load_lora_adapter", json=body)
        async with post as resp:
            assert resp.status == 503
            assert (await resp.json())["error"]["message"].startswith("no replica is available")


QUEUE_TIMEOUT_S = 60  # what a queued request would wait without the outage's sweep
GRACE_S = 0.5


async def post(stack: Stack, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with stack.session.post(stack.proxy_url + "/v1/completions", json=body) as resp:
        return resp.status, orjson.loads(await resp.read())


async def test_a_request_queued_when_the_fleet_dies_is_told_of_the_dead_replica() -> None:
    """Queued behind a full cap just before the fleet dies: answered when the grace ends,
    naming the replica and its reason, not after the queue timeout blaming slots."""
    stack_ = run_stack(
        1, relays=True, grace_s=GRACE_S, max_inflight_per_replica=1,
        queue_timeout=QUEUE_TIMEOUT_S, gateway_failures=1,  # the held request's failure ejects
    )  # fmt: skip
    async with stack_ as stack:
        replica = next(iter(stack.pool))
        limiter = stack.proxy_app[PROXY].dataplane.limiter
        stack.relays[0].freeze()  # the replica hangs: the first request holds the one slot
        first = asyncio.create_task(post(stack, completion()))
        await wait_for(lambda: replica.inflight == 1, what="the slot held")
        queued = asyncio.create_task(post(stack, completion()))
        await wait_for(lambda: limiter.queued == 1, what="a request queued")
        await stack.sims[0].stop()  # the replica dies ...
        stack.relays[0].thaw()  # ... and its relay finds nothing behind it
        status, body = await asyncio.wait_for(queued, ANSWER_BOUND_S)
        assert status == 503, body
        message = body["error"]["message"]
        assert message.startswith(f"no replica is ready: {replica.url} ("), message
        assert message.endswith("; retry when /health answers 200")
        assert (await asyncio.wait_for(first, ANSWER_BOUND_S))[0] >= 500


async def test_a_request_for_a_model_whose_replicas_died_is_refused_others_wait() -> None:
    """Two base models, one replica each: the one serving ``m-a`` dies. Its queued request is
    refused naming it; the one queued for ``m-b`` (its replica alive, busy) is served."""
    stack_ = run_stack(
        sims=[{"model": "m-a"}, {"model": "m-b"}], relays=True, grace_s=GRACE_S,
        max_inflight_per_replica=1, queue_timeout=QUEUE_TIMEOUT_S,
        gateway_failures=1, max_ejection_percent=100,  # the held request's failure ejects
    )  # fmt: skip
    async with stack_ as stack:
        r_a, r_b = stack.pool.get(stack.relays[0].url[7:]), stack.pool.get(stack.relays[1].url[7:])
        assert r_a is not None and r_b is not None
        limiter = stack.proxy_app[PROXY].dataplane.limiter
        for sim in stack.sims:  # hold the generation requests; health still answers
            async with stack.session.post(sim.url + "/pause?mode=keep") as resp:
                assert resp.status == 200
        held = [asyncio.create_task(post(stack, completion(m))) for m in ("m-a", "m-b")]
        await wait_for(lambda: r_a.inflight == 1 and r_b.inflight == 1, what="both slots held")
        queued = [asyncio.create_task(post(stack, completion(m))) for m in ("m-a", "m-b")]
        await wait_for(lambda: limiter.queued == 2, what="two requests queued")
        await stack.relays[0].stall()  # m-a's replica is gone: no new connection ...
        await stack.relays[0].close()  # ... and its open ones are cut
        status, body = await asyncio.wait_for(queued[0], ANSWER_BOUND_S)
        assert status == 503, body
        assert body["error"]["message"].startswith(
            f"no replica that serves m-a is ready: {r_a.url} ("
        ), body
        assert not queued[1].done()  # m-b's replica is healthy: it keeps waiting
        assert r_b.routable
        async with stack.session.post(stack.sims[1].url + "/resume") as resp:
            assert resp.status == 200
        assert [s for s, _ in await asyncio.wait_for(asyncio.gather(held[1], queued[1]), 10)] == [
            200,
            200,
        ]
        assert (await asyncio.wait_for(held[0], ANSWER_BOUND_S))[0] >= 500
