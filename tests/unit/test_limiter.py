"""Slots, caps and the FIFO wait queue, driven by a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from proxy.config import LimitSettings
from proxy.dataplane.limiter import Limiter, Placement, Rejected
from proxy.fleet.pool import ReplicaPool
from tests.support.clock import FakeClock


def make(
    n: int = 2, per_replica: int = 2, **limits: int | float
) -> tuple[Limiter, ReplicaPool, FakeClock]:
    clock = FakeClock()
    settings = LimitSettings(max_inflight_per_replica=per_replica, **limits)
    limiter = Limiter(settings, clock)
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(n)]
    pool = ReplicaPool(urls, clock=clock, followers=(limiter.follow,))
    for replica in pool:
        pool.admit(replica)
    return limiter, pool, clock


def least_loaded(limiter: Limiter, pool: ReplicaPool):  # type: ignore[no-untyped-def]
    def pick() -> Placement | None:
        free = [r for r in pool.routable() if r.inflight < limiter.per_replica]
        return Placement(min(free, key=lambda r: r.inflight), "least_loaded") if free else None

    return pick


async def test_fast_path_takes_slots_until_caps() -> None:
    limiter, pool, _ = make(n=2, per_replica=2)
    pick = least_loaded(limiter, pool)
    got = [await limiter.acquire(pick) for _ in range(4)]
    assert sorted(r.inflight for r in pool) == [2, 2]
    assert limiter.inflight == 4
    assert limiter.try_acquire(pick) is None
    for replica in got:
        limiter.release(replica)
    assert limiter.inflight == 0


async def test_waiters_are_served_in_fifo_order_on_release() -> None:
    limiter, pool, _ = make(n=1, per_replica=1, queue_size=10)
    pick = least_loaded(limiter, pool)
    first = await limiter.acquire(pick)
    order: list[int] = []

    async def wait(i: int) -> None:
        replica = await limiter.acquire(pick)
        order.append(i)
        limiter.release(replica)

    tasks = [asyncio.create_task(wait(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert limiter.queued == 3
    limiter.release(first)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert limiter.inflight == 0


async def test_full_queue_refuses_at_once() -> None:
    limiter, pool, _ = make(n=1, per_replica=1, queue_size=1)
    pick = least_loaded(limiter, pool)
    await limiter.acquire(pick)
    waiter = asyncio.create_task(limiter.acquire(pick))
    await asyncio.sleep(0)
    with pytest.raises(Rejected) as info:
        await limiter.acquire(pick)
    assert info.value.reason == "queue_full"
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_queue_timeout_uses_the_clock() -> None:
    limiter, pool, clock = make(n=1, per_replica=1, queue_timeout_s=5.0)
    pick = least_loaded(limiter, pool)
    await limiter.acquire(pick)
    waiter = asyncio.create_task(limiter.acquire(pick))
    await asyncio.sleep(0)
    clock.advance(4.9)
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(0.2)
    with pytest.raises(Rejected) as info:
        await waiter
    assert info.value.reason == "queue_timeout"
    assert limiter.queued == 0


async def test_overall_cap_below_the_sum_of_replica_caps() -> None:
    limiter, pool, _ = make(n=3, per_replica=10, max_inflight=2)
    pick = least_loaded(limiter, pool)
    await limiter.acquire(pick)
    await limiter.acquire(pick)
    assert limiter.try_acquire(pick) is None


async def test_replica_becoming_healthy_wakes_waiters() -> None:
    limiter, pool, _ = make(n=1, per_replica=1)
    replica = next(iter(pool))
    pool.eject(replica, "probe", "down")
    waiter = asyncio.create_task(limiter.acquire(least_loaded(limiter, pool)))
    await asyncio.sleep(0)
    assert limiter.queued == 1
    pool.admit(replica)
    assert (await waiter).replica is replica


async def test_cancelled_waiter_leaves_no_trace() -> None:
    limiter, pool, _ = make(n=1, per_replica=1)
    pick = least_loaded(limiter, pool)
    held = await limiter.acquire(pick)
    waiter = asyncio.create_task(limiter.acquire(pick))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.queued == 0
    limiter.release(held)
    assert limiter.inflight == 0 and held.replica.inflight == 0
