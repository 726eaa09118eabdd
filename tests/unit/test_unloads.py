"""Unloads answered at once and carried out behind: their order among a name's loads and
unloads (``Turns``), a load waiting on each replica only for the unloads answered before it
there, and an unload a replica answered with an error retried before its next load."""

from __future__ import annotations

import asyncio

from proxy.adapters.turns import Turn, Turns
from proxy.adapters.unloads import Unloads
from proxy.fleet.replica import Health, Replica

WAIT_S = 0.2  # how long a blocked step is watched for a move it must not make


def _replica(n: int) -> Replica:
    return Replica(f"127.0.0.1:{9000 + n}", f"http://127.0.0.1:{9000 + n}", Health.HEALTHY)


async def test_turns_keep_arrival_order_even_for_a_task_that_starts_late() -> None:
    turns, order = Turns(), []

    async def op(turn: Turn, label: str, gate: asyncio.Event | None = None) -> None:
        async with turn:
            if gate is not None:
                await gate.wait()
            order.append(label)

    gate = asyncio.Event()
    first = asyncio.create_task(op(turns.take("v2"), "load", gate))
    await asyncio.sleep(0)  # the load holds its turn, blocked
    unload = turns.take("v2")  # the unload arrives second: its place is taken now
    again = turns.take("v2")
    third = asyncio.create_task(op(again, "load again"))  # its task runs first
    await asyncio.sleep(0)
    second = asyncio.create_task(op(unload, "unload"))
    gate.set()
    async with asyncio.timeout(5):
        await asyncio.gather(first, second, third)
    assert order == ["load", "unload", "load again"]
    assert len(turns) == 0


async def test_a_turn_never_entered_passes_its_place_on() -> None:
    turns = Turns()
    skipped = turns.take("v1")
    later = turns.take("v1")
    skipped.abandon()  # its task was cancelled before it ran
    async with asyncio.timeout(5):
        async with later:
            pass
    assert len(turns) == 0


async def test_a_load_waits_for_earlier_unloads_on_its_replica_only() -> None:
    gates = {0: asyncio.Event(), 1: asyncio.Event()}
    done: list[tuple[int, str]] = []

    async def unload_on(replica: Replica, name: str) -> bool:
        n = int(replica.id.rsplit(":", 1)[1]) - 9000
        await gates[n].wait()
        done.append((n, name))
        return True

    unloads, replicas = Unloads(unload_on), [_replica(0), _replica(1)]
    pending = unloads.queue("trl-policy-v1")
    run = asyncio.create_task(unloads.run(pending, replicas))
    before = unloads.seq  # a load arriving now
    gates[1].set()
    async with asyncio.timeout(5):
        await unloads.cleared(replicas[1], before)  # replica 1 is done: no wait there
    waiting = asyncio.create_task(unloads.cleared(replicas[0], before))
    finished, _ = await asyncio.wait({waiting}, timeout=WAIT_S)
    assert not finished  # replica 0 has not unloaded v1 yet
    later = unloads.queue("trl-policy-v2")  # answered after the load: not waited for
    gates[0].set()
    async with asyncio.timeout(5):
        await waiting
        await run
    assert done == [(1, "trl-policy-v1"), (0, "trl-policy-v1")]
    unloads.abandon(later)
    assert len(unloads) == 0


async def test_an_unload_answered_with_an_error_is_retried_before_the_next_load() -> None:
    answers = {"trl-policy-v1": [False, True]}  # vLLM answers 500 once, then unloads it
    calls: list[str] = []

    async def unload_on(replica: Replica, name: str) -> bool:
        calls.append(name)
        return answers[name].pop(0)

    unloads, replica = Unloads(unload_on), _replica(0)
    await unloads.run(unloads.queue("trl-policy-v1"), [replica])
    assert unloads.owed() == 1
    await unloads.cleared(replica)  # the next load on that replica retries it first
    assert calls == ["trl-policy-v1", "trl-policy-v1"]
    assert unloads.owed() == 0
