"""Queued requests no replica can serve any more (``fleet.outage``): refused when the grace
ends, with the replicas' reasons, not left to wait out the queue timeout and blame slots.
Driven by a fake clock; ``tests/integration/test_outage.py`` does it on loopback servers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from proxy.config import LimitSettings
from proxy.dataplane.limiter import Limiter, Placement, Rejected
from proxy.fleet.outage import Outage
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Listing, Replica
from proxy.runs.run import DEFAULT
from tests.support.clock import FakeClock

GRACE_S = 10.0
QUEUE_TIMEOUT_S = 60.0
BOUND_S = 5.0  # real seconds: time moves by hand, so an answer is due at once


@dataclass
class Asks:
    model: str | None


@dataclass
class Fleet:
    limiter: Limiter
    pool: ReplicaPool
    clock: FakeClock
    replicas: list[Replica]

    def pick(self, model: str | None):  # type: ignore[no-untyped-def]
        def pick() -> Placement | None:
            free = [
                r
                for r in self.pool.routable()
                if r.inflight < self.limiter.per_replica
                and (model is None or r.base_model is None or r.serves(model))
            ]
            return Placement(free[0], "first") if free else None

        return pick

    async def ask(self, model: str | None) -> Placement:
        return await self.limiter.acquire(self.pick(model), DEFAULT, Asks(model))

    def queue(self, model: str | None) -> asyncio.Task[Placement]:
        return asyncio.create_task(self.ask(model))


def fleet(*models: str | None) -> Fleet:
    """One replica per model (its base model; None: not listed yet), each with one slot."""
    clock = FakeClock()
    limiter_settings = LimitSettings(max_inflight_per_replica=1, queue_timeout_s=QUEUE_TIMEOUT_S)
    outage = Outage(clock)
    limiter = Limiter(limiter_settings, clock, outage)
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(len(models))]
    pool = ReplicaPool(
        urls, clock=clock, followers=(outage.follow, limiter.follow), grace_s=GRACE_S
    )
    replicas = list(pool)
    for replica, model in zip(replicas, models, strict=True):
        replica.listing = Listing(base_model=model)
        pool.admit(replica)
    return Fleet(limiter, pool, clock, replicas)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_request_queued_before_the_fleet_went_dark_is_refused_when_the_grace_ends() -> None:
    f = fleet("m", "m")
    for _ in f.replicas:
        await f.ask("m")  # every slot held
    waiter = f.queue("m")
    await settle()
    assert f.limiter.queued == 1
    for replica in f.replicas:
        f.pool.eject(replica, "transport", "transport: ConnectionRefusedError")
    f.clock.advance(GRACE_S - 0.1)
    await settle()
    assert not waiter.done()  # a blip is waited out
    f.clock.advance(0.2)
    with pytest.raises(Rejected) as info:
        await asyncio.wait_for(waiter, BOUND_S)
    assert info.value.reason == "no_replica"
    assert str(info.value) == (
        "no replica is ready: http://127.0.0.1:9000 (transport: ConnectionRefusedError), "
        "http://127.0.0.1:9001 (transport: ConnectionRefusedError); "
        "retry when /health answers 200"
    )
    assert f.limiter.queued == 0


async def test_a_replica_back_within_the_grace_keeps_the_waiter() -> None:
    f = fleet("m")
    held = await f.ask("m")
    waiter = f.queue("m")
    await settle()
    f.pool.eject(f.replicas[0], "probe", "probe failed: timeout")
    f.clock.advance(GRACE_S / 2)
    f.pool.admit(f.replicas[0])
    f.clock.advance(GRACE_S)
    await settle()
    assert not waiter.done()
    f.limiter.release(held)
    assert (await waiter).replica is f.replicas[0]


async def test_a_stranded_model_is_refused_while_another_model_keeps_waiting() -> None:
    f = fleet("m-a", "m-b")
    await f.ask("m-a")
    held_b = await f.ask("m-b")
    waiting_a, waiting_b = f.queue("m-a"), f.queue("m-b")
    await settle()
    assert f.limiter.queued == 2
    f.pool.eject(f.replicas[0], "probe", "probe failed: connection refused")
    f.clock.advance(GRACE_S + 0.1)
    with pytest.raises(Rejected) as info:
        await asyncio.wait_for(waiting_a, BOUND_S)
    assert str(info.value) == (
        "no replica that serves m-a is ready: http://127.0.0.1:9000 "
        "(probe failed: connection refused); retry when /health answers 200"
    )
    await settle()
    assert not waiting_b.done()  # its model still has a healthy replica
    with pytest.raises(Rejected, match="no replica that serves m-a is ready"):
        await f.ask("m-a")  # past the grace: refused at once
    f.limiter.release(held_b)
    assert (await waiting_b).replica is f.replicas[1]


async def test_a_version_no_replica_holds_yet_keeps_waiting() -> None:
    """A version on its way: the fleet is loading it, so a request for it waits as before."""
    f = fleet("m")
    waiter = f.queue("trl-policy-v2")
    await settle()
    assert f.limiter.queued == 1
    f.clock.advance(GRACE_S * 2)
    await settle()
    assert not waiter.done()
    f.clock.advance(QUEUE_TIMEOUT_S)
    with pytest.raises(Rejected) as info:
        await asyncio.wait_for(waiter, BOUND_S)
    assert info.value.reason == "queue_timeout"


async def test_a_replica_that_has_not_listed_its_models_may_serve_any() -> None:
    f = fleet("m-a", None)
    await f.ask("m-a")
    held = await f.ask("m-a")  # the unlisted replica takes it
    waiter = f.queue("m-a")
    await settle()
    f.pool.eject(f.replicas[0], "probe", "down")
    f.clock.advance(GRACE_S * 2)
    await settle()
    assert not waiter.done()
    f.limiter.release(held)
    assert (await waiter).replica is f.replicas[1]
