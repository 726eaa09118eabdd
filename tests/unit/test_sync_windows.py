"""TRL's sync windows as ``FleetSync`` keeps them: answered (nothing frozen, no state to replay)
or forwarded (the fleet frozen for the window, the pause replayed into a joining replica)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from proxy.config import UpstreamSettings
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.sync import FleetSync
from proxy.upstream.client import UpstreamClient
from tests.support.clock import FakeClock


@asynccontextmanager
async def _sync(clock: FakeClock, **kw: Any) -> AsyncIterator[FleetSync]:
    pool = ReplicaPool(["http://127.0.0.1:9"], clock=clock)
    client = UpstreamClient(UpstreamSettings())
    try:
        yield FleetSync(pool, client, FleetInfo(client, pool), adapters=None, clock=clock, **kw)  # type: ignore[arg-type]
    finally:
        await client.close()


def _frozen(sync: FleetSync) -> bool:
    return sync.paused


async def test_an_answered_pause_keeps_the_window_and_freezes_nothing() -> None:
    clock = FakeClock()
    async with _sync(clock) as sync:
        _answered(sync, clock)


def _answered(sync: FleetSync, clock: FakeClock) -> None:
    assert not sync.forward_pause
    assert sync.control_applied("/pause", "mode=keep", frozen=False) is None
    assert not _frozen(sync)  # nothing to replay into a replica that joins now
    clock.now += 0.25
    assert sync.control_applied("/resume", "", frozen=False) == 0.25
    assert (sync.syncs, sync.last_window_s, sync.paused_seconds()) == (1, 0.25, 0.0)
    assert not sync.paused  # the fleet's state did not change: nothing to replay


async def test_a_forwarded_pause_freezes_the_fleet_for_the_window() -> None:
    clock = FakeClock()
    async with _sync(clock, forward_pause=True) as sync:
        _forwarded(sync, clock)


def _forwarded(sync: FleetSync, clock: FakeClock) -> None:
    sync.control_applied("/pause", "mode=keep", frozen=True)
    assert _frozen(sync)
    clock.now += 1.5
    assert sync.paused_seconds() == 1.5  # the open window counts
    assert sync.control_applied("/resume", "", frozen=True) == 1.5
    assert not _frozen(sync)
    assert (sync.syncs, sync.paused_seconds()) == (1, 1.5)
