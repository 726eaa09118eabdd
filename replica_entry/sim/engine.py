"""Admission and time-keeping of the simulated engine: who is in flight, waiting or running,
and sleeping the simulated time so that pause, abort and client disconnects interrupt it.

A generation request is *in flight* from arrival to answer, *waiting* while the engine is
paused before it starts, and *running* once admitted. ``spend`` sleeps simulated engine time:
it stops counting while the engine is frozen (pause ``keep``), returns early when an abort
ends the request, and raises ``ClientGone`` when the client has disconnected.

Why poll for disconnects: aiohttp tells a handler that its client left only by cancelling it,
and only when the server was built with ``handler_cancellation=True``, which the test harness's
runner is not; so waits wake every ``POLL_S`` to look at the connection. Zero-length waits
never sleep, which keeps the default (zero-latency) replica fast.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from replica_entry.sim.pause import PauseGate, PauseMode

POLL_S = 0.05

# Returns True once the requesting client is gone; ``None`` where nobody can go away.
Probe = Callable[[], bool] | None


class ClientGone(ConnectionResetError):
    """The client disconnected while its request was being served."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted request: the abort epoch it runs under and how busy the engine was."""

    epoch: int
    other_running: int
    lora: str | None


class Engine:
    def __init__(self) -> None:
        self.gate = PauseGate()
        self.in_flight = 0
        self.max_in_flight = 0
        self.waiting = 0
        self.running = 0
        self.running_by_lora: Counter[str] = Counter()
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def tracked(self) -> AsyncIterator[None]:
        """Count one request in flight for the duration of the block."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1

    async def admit(self, lora: str | None, probe: Probe) -> Ticket:
        """Wait while paused, then start running. Pair with ``release``."""
        while self.gate.paused:
            self.waiting += 1
            try:
                await wait_event(self.gate.next_change(), None, probe)
            finally:
                self.waiting -= 1
        ticket = Ticket(self.gate.epoch, self.running, lora)
        self.running += 1
        if lora is not None:
            self.running_by_lora[lora] += 1
        self._idle.clear()
        return ticket

    def release(self, ticket: Ticket) -> None:
        self.running -= 1
        if ticket.lora is not None:
            self.running_by_lora[ticket.lora] -= 1
            if self.running_by_lora[ticket.lora] <= 0:
                del self.running_by_lora[ticket.lora]
        if self.running == 0:
            self._idle.set()

    async def spend(self, ticket: Ticket, seconds: float, probe: Probe) -> tuple[bool, float]:
        """Run for ``seconds`` of engine time. Returns (finished, seconds actually run)."""
        loop = asyncio.get_running_loop()
        spent = 0.0
        while True:
            if ticket.epoch != self.gate.epoch:
                return False, spent
            if self.gate.frozen:
                await wait_event(self.gate.next_change(), None, probe)
                continue
            if spent >= seconds:
                return True, spent
            start = loop.time()
            await wait_event(self.gate.next_change(), seconds - spent, probe)
            spent += loop.time() - start

    async def pause(self, mode: PauseMode) -> None:
        """Pause; for ``wait`` and ``abort``, return once no request is running."""
        self.gate.pause(mode)
        if mode != "keep":
            await self._idle.wait()

    def resume(self) -> None:
        self.gate.resume()


async def sleep(seconds: float, probe: Probe) -> None:
    """Sleep ``seconds`` unless the client goes away first (then ``ClientGone``)."""
    if seconds > 0:
        await wait_event(asyncio.Event(), seconds, probe)


async def wait_event(event: asyncio.Event, limit_s: float | None, probe: Probe) -> None:
    """Wait for ``event`` or ``limit_s`` seconds (``None``: no limit), checking ``probe``
    every ``POLL_S``."""
    loop = asyncio.get_running_loop()
    deadline = None if limit_s is None else loop.time() + limit_s
    while not event.is_set():
        if probe is not None and probe():
            raise ClientGone("client disconnected")
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            return
        step = left if probe is None else min(POLL_S, left if left is not None else POLL_S)
        with suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), step)
