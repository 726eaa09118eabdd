"""A hand-driven clock for tests: time moves only when ``advance`` is called (or ``now`` is set).

It is the proxy's ``Clock`` (monotonic, async sleep, timers) and, called, the simulated
replica's wall clock (the mount lag is measured on file times).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable


class FakeTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._timers: list[tuple[float, int, FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        self.call_later(seconds, wake)
        await done

    def call_later(self, seconds: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer()
        heapq.heappush(self._timers, (self.now + seconds, next(self._seq), timer, callback))
        return timer

    @property
    def timers(self) -> int:
        """Timers (and sleeps) waiting to fire: a loop that has gone to sleep shows here."""
        return sum(1 for _, _, timer, _ in self._timers if not timer.cancelled)

    def advance(self, seconds: float) -> None:
        """Move time forward, firing due timers in order."""
        target = self.now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer, callback = heapq.heappop(self._timers)
            self.now = when
            if not timer.cancelled:
                callback()
        self.now = target


class SteppingClock:
    """deploy's synchronous ``Clock``: a sleep is that much time passing, at once (the deploy
    commands block on the Hub client, so their waits are plain sleeps)."""

    WALL = 1_767_225_600.0  # 2026-01-01T00:00:00Z

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def wall(self) -> float:
        return self.WALL
