"""Injectable time, and the background loop that runs on it.

Background loops and timeouts read a ``Clock`` so tests can drive time by hand; every periodic
loop (health, discovery, watcher) runs through ``run_every``, which survives its step's
exceptions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic time, sleeping and one-shot timers."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer: ...


class RealClock:
    """The event loop's own time."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)


Failed = Callable[[str, BaseException], None]


async def run_every(
    clock: Clock,
    interval_s: Callable[[], float],
    step: Callable[[], Awaitable[None]],
    *,
    task: str,
    failed: Failed,
) -> None:
    """Run ``step`` now and then every ``interval_s()`` seconds, forever.

    A background loop never dies of an exception: ``failed(task, exc)`` logs and counts it and
    the loop carries on at the next interval (cancellation still ends it)."""
    while True:
        try:
            await step()
        except Exception as exc:
            failed(task, exc)
        await clock.sleep(interval_s())
