"""Admission, pause modes and interruptible time of the simulated engine (no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from replica_entry.sim.engine import ClientGone, Engine, sleep


async def _settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_admission_waits_while_paused() -> None:
    engine = Engine()
    engine.gate.pause("keep")
    admit = asyncio.create_task(engine.admit(None, None))
    await _settle()
    assert not admit.done()
    assert engine.waiting == 1
    engine.resume()
    ticket = await admit
    assert (engine.waiting, engine.running, ticket.other_running) == (0, 1, 0)
    engine.release(ticket)
    assert engine.running == 0


async def test_keep_freezes_spent_time_until_resume() -> None:
    engine = Engine()
    ticket = await engine.admit("lora-a", None)
    assert dict(engine.running_by_lora) == {"lora-a": 1}
    engine.gate.pause("keep")
    spend = asyncio.create_task(engine.spend(ticket, 0.0, None))
    await _settle()
    assert not spend.done()
    engine.resume()
    assert await spend == (True, 0.0)
    engine.release(ticket)
    assert not engine.running_by_lora


async def test_abort_ends_a_running_spend() -> None:
    engine = Engine()
    ticket = await engine.admit(None, None)
    spend = asyncio.create_task(engine.spend(ticket, 3600.0, None))
    await _settle()
    pause = asyncio.create_task(engine.pause("abort"))
    finished, spent = await spend
    assert not finished
    assert spent < 3600.0
    assert not pause.done()  # it waits for the aborted request to leave
    engine.release(ticket)
    await pause
    assert engine.gate.paused


async def test_a_new_request_after_an_abort_runs_normally() -> None:
    engine = Engine()
    await engine.pause("abort")
    engine.resume()
    ticket = await engine.admit(None, None)
    assert await engine.spend(ticket, 0.0, None) == (True, 0.0)


async def test_a_gone_client_interrupts_waiting() -> None:
    with pytest.raises(ClientGone):
        await sleep(3600.0, lambda: True)
    engine = Engine()
    engine.gate.pause("keep")
    with pytest.raises(ClientGone):
        await engine.admit(None, lambda: True)
    assert engine.waiting == 0


async def test_tracked_counts_the_peak_in_flight() -> None:
    engine = Engine()
    async with engine.tracked(), engine.tracked():
        assert engine.in_flight == 2
    assert (engine.in_flight, engine.max_in_flight) == (0, 2)
