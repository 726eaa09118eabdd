"""Weighted fair shares of the limiter's slots between runs: a burst never starves another run,
an idle run's slots are used by the others, each run's queue bound is its own."""

from __future__ import annotations

import asyncio

import pytest

from proxy.config import LimitSettings
from proxy.dataplane.limiter import Limiter, Placement, Rejected
from proxy.fleet.pool import ReplicaPool
from proxy.runs.run import DEFAULT, Run
from proxy.runs.table import Runs
from tests.support.clock import FakeClock


class Fleet:
    """One replica of ``slots`` slots behind a limiter shared by ``runs``; grants recorded."""

    def __init__(self, runs: dict[str, float], slots: int, queue_size: int = 100) -> None:
        clock = FakeClock()
        settings = LimitSettings(max_inflight_per_replica=slots, queue_size=queue_size)
        self.runs = Runs(runs)
        self.limiter = Limiter(settings, clock)
        self.pool = ReplicaPool(
            ["http://127.0.0.1:9000"], clock=clock, followers=(self.limiter.follow,)
        )
        for replica in self.pool:
            self.pool.admit(replica)
        self.held: list[Placement] = []
        self.granted: list[str | None] = []  # whose request got each slot, in grant order
        self.tasks: list[asyncio.Task[None]] = []

    def pick(self) -> Placement | None:
        (replica,) = self.pool.routable()
        return Placement(replica, "only") if replica.inflight < self.limiter.per_replica else None

    def run(self, name: str | None) -> Run:
        """The declared run ``name``; None: the default run (the bare path)."""
        return DEFAULT if name is None else self.runs.get(name)

    def inflight_of(self, name: str) -> int:
        return self.limiter.inflight_of(self.run(name))

    def queued_of(self, name: str) -> int:
        return self.limiter.queued_of(self.run(name))

    async def take(self, run: str | None) -> None:
        placed = await self.limiter.acquire(self.pick, self.run(run))
        self.held.append(placed)
        self.granted.append(run)

    async def send(self, run: str | None, count: int) -> None:
        """``count`` requests of ``run``, each running (or queued) before this returns."""
        for _ in range(count):
            self.tasks.append(asyncio.create_task(self.take(run)))
            await asyncio.sleep(0)  # one loop turn: the task reaches its slot or its queue

    async def release(self, run: str | None) -> None:
        """End one running request of ``run``; the slot's next holder has its grant on return."""
        placed = next(p for p in self.held if p.run is self.run(run))
        self.held.remove(placed)
        before, waiting = len(self.granted), self.limiter.queued
        self.limiter.release(placed)
        for _ in range(10):  # loop turns, not time: the woken task records its grant
            if len(self.granted) > before or not waiting:
                break
            await asyncio.sleep(0)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def test_a_burst_does_not_starve_a_run_that_arrives_later() -> None:
    fleet = Fleet({"a": 1, "b": 1}, slots=4)
    await fleet.send("a", 4)  # a takes every slot, then queues more
    await fleet.send("a", 6)
    await fleet.send("b", 2)
    assert (fleet.inflight_of("a"), fleet.queued_of("a")) == (4, 6)
    fleet.granted.clear()
    for _ in range(4):
        await fleet.release("a")
    # b is furthest below its share: both of its requests go first, though a queued earlier.
    assert fleet.granted == ["b", "b", "a", "a"]
    await fleet.close()


async def test_slots_split_by_weight_while_both_runs_wait() -> None:
    fleet = Fleet({"a": 3, "b": 1}, slots=8)
    await fleet.send(None, 8)  # the bare path holds every slot
    await fleet.send("a", 20)
    await fleet.send("b", 20)
    fleet.granted.clear()
    for _ in range(8):
        await fleet.release(None)
    assert (fleet.granted.count("a"), fleet.granted.count("b")) == (6, 2)
    # Steady state: a slot a run frees goes back to it while the split is at the weights.
    fleet.granted.clear()
    for run in ("a", "b", "a", "a", "b"):
        await fleet.release(run)
    assert fleet.granted == ["a", "b", "a", "a", "b"]
    assert (fleet.inflight_of("a"), fleet.inflight_of("b")) == (6, 2)
    await fleet.close()


async def test_an_idle_runs_share_is_used_by_the_others() -> None:
    fleet = Fleet({"a": 1, "b": 1}, slots=6)
    await fleet.send("a", 6)  # b declared but idle: a uses all six
    assert fleet.inflight_of("a") == 6
    await fleet.send("a", 3)
    fleet.granted.clear()
    for _ in range(3):
        await fleet.release("a")
    assert fleet.granted == ["a", "a", "a"]
    assert fleet.limiter.queued == 0
    await fleet.close()


async def test_each_runs_queue_bound_is_its_share_of_the_queue() -> None:
    fleet = Fleet({"a": 1, "b": 1}, slots=1, queue_size=4)
    await fleet.send("a", 3)  # one running, two queued: a's share of the queue
    with pytest.raises(Rejected, match="run a's wait queue is full \\(2 requests"):
        await fleet.limiter.acquire(fleet.pick, fleet.run("a"))
    await fleet.send("b", 2)  # a's burst left b its own room
    assert (fleet.queued_of("a"), fleet.queued_of("b")) == (2, 2)
    await fleet.close()


async def test_the_bare_path_alone_is_one_fifo_as_before() -> None:
    fleet = Fleet({}, slots=1)
    order: list[int] = []

    async def take(i: int) -> None:
        fleet.held.append(await fleet.limiter.acquire(fleet.pick))
        order.append(i)

    await fleet.send(None, 1)
    tasks = [asyncio.create_task(take(i)) for i in range(4)]
    await asyncio.sleep(0)
    for _ in range(4):
        fleet.limiter.release(fleet.held.pop(0))
        await asyncio.sleep(0)
    assert order == [0, 1, 2, 3]
    await asyncio.gather(*tasks)
    await fleet.close()
