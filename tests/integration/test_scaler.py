"""The scaler's actuator against the Jobs stand-in (the real huggingface_hub client), the real
proxy and simulated replica jobs (``tests.support.scaling``): the bounds hold whatever the
decider says, a restarted trainer adopts the jobs that exist, a launch that never becomes ready
is cancelled and counted once, a retire drains the replica whose loss costs the least cached
prefix and cancels it once nothing is in flight there.

Time is the scaler's fake wall clock, moved a window at a time; the proxy and the replicas run
for real on loopback, and a test waits on their states (routed, draining), never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from aiohttp import ClientError, ClientSession

from deploy.scaler.config import Scaling
from deploy.scaler.decide import HOUR_S, Policy
from deploy.scaler.state import MemoryState, StateFile
from proxy.fleet.replica import Replica
from tests.support.fleet import Sim
from tests.support.scaling import REPLICA_KEY, Run, Waits, scaling_run, scripted
from tests.support.waiting import wait_for

WINDOW_S = 60.0
# Real runs' thresholds but a short sustain, so a test needs few windows (the cooldown stays).
POLICY = Policy(window_s=WINDOW_S, sustain_s=WINDOW_S, cooldown_s=120.0, startup_s=120.0)


async def test_bounds_hold_under_a_decider_forced_to_flap() -> None:
    """A decider that asks for 3 more, then 3 fewer, every window: the fleet stays within the
    range's minimum and the budget's ceiling (2 of the range's 3: $5/h each beside the trainer's
    $10/h within $20.50/h), and launches stay within 2 an hour. A scaler that did what the
    decider said would launch 3 at once, and retire below the minimum."""
    scaling = Scaling(1, 3, budget_per_h=20.5, max_launches_per_h=2, policy=POLICY)
    async with scaling_run(scaling) as run:
        flaps = [("add", 3), ("retire", 3)] * 8
        scaler = run.scaler(scripted(*flaps, ("add", 3), ("add", 3)))
        await run.tick(scaler)  # the first window starts
        seen_live, seen_wanted = [], []
        for _ in range(len(flaps)):
            run.wall.advance(WINDOW_S)
            await run.tick(scaler)
            live = run.replica_jobs()
            seen_live.append(len(live))
            seen_wanted.append(len([j for j in live if j.id not in scaler.state.retiring]))
            await run.routed(seen_wanted[-1])
        assert max(seen_live) == 2, seen_live  # the budget's ceiling, reached, never crossed
        assert min(seen_wanted) >= 1, seen_wanted
        launched = run.scaled()
        assert len(launched) == 2  # the hour's bound, though the decider asked 8 times
        # An hour after the first launch the bound lets the next ones through.
        run.wall.advance(HOUR_S)
        await run.tick(scaler)
        run.wall.advance(WINDOW_S)
        await run.tick(scaler)
        assert len(run.scaled()) > 2
        assert len(run.replica_jobs()) <= 2


async def test_a_restarted_trainer_adopts_the_replica_jobs_instead_of_launching() -> None:
    scaling = Scaling(2, 4, max_launches_per_h=1, policy=POLICY)
    async with scaling_run(scaling, start=1) as run:
        first = run.scaler()  # below the minimum: it launches one
        await run.tick(first)
        run.never_ready.add("r1-replica-1")  # still starting when the trainer dies
        run.wall.advance(WINDOW_S)
        assert (await run.tick(first)).action == "add"  # type: ignore[union-attr]
        assert [job.name for job in run.scaled()] == ["r1-replica-1"]
        # The trainer job runs again: a new scaler, its state lost, over the same jobs.
        script, seen = scripted(("add", 1)), []

        def recording(window: Any, history: Any, bounds: Any, policy: Any) -> Any:
            seen.append(len(history.launches))
            return script(window, history, bounds, policy)

        again = run.scaler(recording, store=MemoryState())
        await run.tick(again)
        run.wall.advance(WINDOW_S)
        decision = await run.tick(again)
        assert decision is not None and decision.action == "add"  # the decider asked ...
        assert seen and seen[-1] == 1  # ... knowing of the hour's launch it adopted ...
        assert len(run.scaled()) == 1  # ... the hour's launch was the first scaler's
        assert list(again.state.pending) == [run.scaled()[0].id]  # adopted, under way
        # With the real decider: 2 ready or starting is the minimum, nothing to launch.
        real = run.scaler(store=MemoryState())
        await run.tick(real)
        run.wall.advance(WINDOW_S)
        assert (await run.tick(real)).action == "hold"  # type: ignore[union-attr]
        assert len(run.replica_jobs()) == 2
        # The adopted launch becomes ready: its start-up (from the job's creation) is measured.
        run.never_ready.clear()
        await run.jobs_run()
        await run.routed(2)
        run.wall.advance(30.0)
        await run.tick(real)
        assert real.state.pending == {}
        assert real.state.history.startup_s is not None and real.state.history.startup_s > 30


async def test_a_launch_that_never_becomes_ready_is_cancelled_counted_and_not_relaunched() -> None:
    scaling = Scaling(1, 3, policy=POLICY)
    async with scaling_run(scaling) as run:
        run.never_ready.add("r1-replica-1")
        waits = Waits(waited=0.5)  # generation limits the run all along
        scaler = run.scaler(waits=waits, ready_timeout_s=300.0)
        await run.tick(scaler)
        decisions = []
        for _ in range(20):  # 20 minutes of pressure
            run.wall.advance(WINDOW_S)
            decision = await run.tick(scaler)
            decisions.append(decision.action if decision else None)
        (launch,) = run.scaled()  # one launch: no loop
        assert launch.name == "r1-replica-1" and launch.stage == "CANCELED"
        assert launch.id in run.hub.cancelled
        assert scaler.state.failed == 1
        assert scaler.state.history.failed_at is not None
        assert decisions.count("add") == 1, decisions
        assert "the last launch never became ready" in (scaler.state.last or {})["reason"]
        assert len(run.replica_jobs()) == 1


async def test_retire_drains_the_least_cache_loss_replica_then_cancels_it() -> None:
    scaling = Scaling(1, 3, policy=POLICY)
    async with scaling_run(scaling, start=3) as run, ClientSession() as session:
        scaler = run.scaler(scripted(("hold", 0), ("retire", 1)), drain_timeout_s=600.0)
        await run.tick(scaler)
        run.wall.advance(WINDOW_S)
        await run.tick(scaler)  # hold: the window's cache figures start here
        # Replicas 1 and 2 serve prompts their caches hold; replica 0, the oldest, none: the
        # newest would go by age alone, replica 0 by what its loss costs.
        keys = await _keys_by_replica(run, session)
        for name, repeats in (("r1-replica-1", 4), ("r1-replica-2", 2)):
            for _ in range(repeats):
                await _complete(run, session, keys[name], "a long shared prompt " * 40)
        oldest = run.sims["r1-replica-0"]
        await _post(session, oldest.url, "/pause")  # a request held in flight there
        held = asyncio.ensure_future(_complete(run, session, keys["r1-replica-0"], "held"))
        await wait_for(lambda: _replica(run, oldest).inflight == 1, what="a request in flight")
        run.wall.advance(WINDOW_S)
        decision = await run.tick(scaler)
        assert decision is not None and decision.action == "retire"
        assert list(scaler.state.retiring) == [run.hub.named("r1-replica-0").id]
        assert _replica(run, oldest).draining  # drained first ...
        run.wall.advance(10.0)
        await run.tick(scaler)
        assert run.hub.named("r1-replica-0").stage == "RUNNING"  # ... not cancelled in flight
        await _post(session, oldest.url, "/resume")
        assert (await held) == 200
        await wait_for(lambda: _replica(run, oldest).inflight == 0, what="nothing in flight")
        run.wall.advance(10.0)
        await run.tick(scaler)
        assert run.hub.named("r1-replica-0").stage == "CANCELED"
        assert [j.name for j in run.replica_jobs()] == ["r1-replica-1", "r1-replica-2"]
        await run.routed(2)


async def test_a_drain_that_outlasts_its_bound_is_cut() -> None:
    scaling = Scaling(1, 2, policy=POLICY)
    async with scaling_run(scaling, start=2) as run, ClientSession() as session:
        scaler = run.scaler(scripted(("retire", 1)), drain_timeout_s=120.0)
        await run.tick(scaler)
        keys = await _keys_by_replica(run, session)
        held = []
        for name, sim in run.sims.items():  # a request held in flight on each replica
            await _post(session, sim.url, "/pause")
            held.append(asyncio.ensure_future(_complete(run, session, keys[name], "held")))
        await wait_for(lambda: all(_replica(run, s).inflight == 1 for s in run.sims.values()),
                       what="a request in flight on each replica")  # fmt: skip
        newest = run.sims["r1-replica-1"]
        run.wall.advance(WINDOW_S)
        await run.tick(scaler)  # drains the newest (no cache anywhere, one in flight each)
        assert _replica(run, newest).draining
        run.wall.advance(60.0)
        await run.tick(scaler)
        assert run.hub.named("r1-replica-1").stage == "RUNNING"
        run.wall.advance(61.0)
        await run.tick(scaler)  # the bound passed: cancelled with its request in flight
        assert run.hub.named("r1-replica-1").stage == "CANCELED"
        await _post(session, run.sims["r1-replica-0"].url, "/resume")
        with contextlib.suppress(ClientError):
            await asyncio.gather(*held)


def _replica(run: Run, sim: Sim) -> Replica:
    (replica,) = [r for r in run.pool if r.id == sim.id]
    return replica


async def _post(session: ClientSession, url: str, path: str) -> None:
    headers = {"Authorization": f"Bearer {REPLICA_KEY}"}
    async with session.post(url + path, headers=headers) as answer:
        assert answer.status == 200, await answer.text()


async def _complete(run: Run, session: ClientSession, key: str, prompt: str) -> int:
    body = {"model": "sim-model", "prompt": prompt, "max_tokens": 2}
    headers = {"X-Routing-Key": key}
    async with session.post(f"{run.proxy_url}/v1/completions", json=body, headers=headers) as a:
        await a.read()
        return a.status


async def _keys_by_replica(run: Run, session: ClientSession) -> dict[str, str]:
    """A routing key landing on each running replica job, found by where a short probe went
    (too short for any cache block)."""
    found: dict[str, str] = {}
    for n in range(200):
        key = f"key-{n}"
        before = {name: _completions(sim) for name, sim in run.sims.items()}
        assert await _complete(run, session, key, f"probe {n}") == 200
        for name, sim in run.sims.items():
            if _completions(sim) > before[name]:
                found.setdefault(name, key)
        if len(found) == len(run.sims):
            return found
    raise AssertionError(f"no key found for {set(run.sims) - set(found)}")


def _completions(sim: Sim) -> int:
    return sum(1 for record in sim.state.records if record.path == "/v1/completions")


async def test_a_restarted_trainer_restores_its_history_from_the_bucket(tmp_path: Path) -> None:
    """The state file (in the bucket, ``StateFile``) carries the back-off of a failed launch
    across the trainer's restart: the new scaler does not launch again under pressure."""
    scaling = Scaling(1, 3, policy=POLICY)
    async with scaling_run(scaling) as run:
        run.never_ready.add("r1-replica-1")
        waits = Waits(waited=0.5)
        store = StateFile(tmp_path / ".scaler" / "scaler.json")
        first = run.scaler(waits=waits, ready_timeout_s=300.0, store=store)
        await run.tick(first)
        for _ in range(8):  # an add at 2 windows, its launch cancelled 5 minutes later
            run.wall.advance(WINDOW_S)
            await run.tick(first)
        assert first.state.failed == 1
        again = run.scaler(waits=waits, ready_timeout_s=300.0, store=store)
        assert again.state.history == first.state.history and again.state.failed == 1
        await run.tick(again)
        for _ in range(5):
            run.wall.advance(WINDOW_S)
            decision = await run.tick(again)
            assert decision is None or decision.action == "hold"
        assert len(run.scaled()) == 1


async def test_a_launch_adopted_long_after_it_began_gets_the_ready_bound_again() -> None:
    """A new scaler cannot tell a launch stuck since long ago from a replica HF Jobs is running
    again: it gives it the ready bound from now (no start-up measured), then cancels it."""
    scaling = Scaling(1, 3, policy=POLICY)
    async with scaling_run(scaling) as run:
        run.never_ready.add("r1-replica-1")
        first = run.scaler(scripted(("add", 1)))
        await run.tick(first)
        run.wall.advance(WINDOW_S)
        await run.tick(first)
        run.wall.advance(400.0)  # the trainer was away past the ready bound (300 s)
        again = run.scaler(ready_timeout_s=300.0, store=MemoryState())
        await run.tick(again)
        (launch,) = run.scaled()
        assert launch.stage == "RUNNING" and again.state.pending == {launch.id: run.wall.now}
        run.wall.advance(301.0)
        await run.tick(again)
        assert launch.stage == "CANCELED" and again.state.failed == 1
        assert again.state.history.startup_s is None
