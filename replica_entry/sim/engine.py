"""Admission and time-keeping of the simulated engine: who is in flight, waiting or running,
and sleeping the simulated time so that pause, abort and client disconnects interrupt it.

A generation request is *in flight* from arrival to answer, *waiting* before it starts (while
the engine is paused, or while it is full: ``max_num_seqs`` requests running, or the KV blocks
it needs not free), and *running* once admitted. A running request holds KV blocks (its
prompt and what it has generated so far, ``grow``); ``kv_usage`` is their share of the KV
capacity, as vLLM's ``kv_cache_usage_perc`` counts it (cached blocks nobody runs on are free).
Nothing is ever preempted: the simulation admits a request only when its prompt fits.
``spend`` sleeps simulated engine time:
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


@dataclass(slots=True)
class Ticket:
    """An admitted request: the abort epoch it runs under, how busy the engine was, and the KV
    blocks it holds."""

    epoch: int
    other_running: int
    lora: str | None
    blocks: int


class Engine:
    def __init__(self, max_num_seqs: int = 0, kv_blocks: int = 0) -> None:
        self.gate = PauseGate()
        self.max_num_seqs = max_num_seqs  # 0: no limit
        self.kv_blocks = kv_blocks  # 0: no limit
        self.in_flight = 0
        self.max_in_flight = 0
        self.waiting = 0
        self.running = 0
        self.held_blocks = 0
        self.running_by_lora: Counter[str] = Counter()
        self._idle = asyncio.Event()
        self._idle.set()
        self._freed = asyncio.Event()  # pulsed when a running request leaves

    @asynccontextmanager
    async def tracked(self) -> AsyncIterator[None]:
        """Count one request in flight for the duration of the block."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1

    def full(self, blocks: int) -> bool:
        """No room for one more request needing ``blocks`` KV blocks (an idle engine has room)."""
        if self.running == 0:
            return False
        if self.max_num_seqs and self.running >= self.max_num_seqs:
            return True
        return bool(self.kv_blocks) and self.held_blocks + blocks > self.kv_blocks

    def kv_usage(self, capacity: int) -> float:
        """Share of the KV capacity held by running requests (``capacity`` when unlimited)."""
        total = self.kv_blocks or capacity
        return min(self.held_blocks / total, 1.0) if total else 0.0

    async def admit(self, lora: str | None, probe: Probe, blocks: int = 0) -> Ticket:
        """Wait while paused or full, then start running, holding ``blocks``. Pair with
        ``release``."""
        while self.gate.paused or self.full(blocks):
            self.waiting += 1
            try:
                event = self.gate.next_change() if self.gate.paused else self._freed
                await wait_event(event, None, probe)
            finally:
                self.waiting -= 1
        ticket = Ticket(self.gate.epoch, self.running, lora, blocks)
        self.held_blocks += blocks
        self.running += 1
        if lora is not None:
            self.running_by_lora[lora] += 1
        self._idle.clear()
        return ticket

    def grow(self, ticket: Ticket, blocks: int) -> None:
        """The request now holds ``blocks`` KV blocks (its context grew)."""
        self.held_blocks += blocks - ticket.blocks
        ticket.blocks = blocks

    def release(self, ticket: Ticket) -> None:
        self.held_blocks -= ticket.blocks
        ticket.blocks = 0
        freed, self._freed = self._freed, asyncio.Event()
        freed.set()
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
