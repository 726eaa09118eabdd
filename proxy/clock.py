"""Injectable time, the background loop that runs on it, and the one backoff policy.

Background loops and timeouts read a ``Clock`` so tests can drive time by hand; every periodic
loop (health, discovery, watcher) runs through ``run_every``, which survives its step's
exceptions. Every retry that waits longer each time (a lagging mount's adapter load, a command
an adapter agent retries, the mirror's copy, the supervisor's restart) takes its delays from one
``Backoff``: each caller keeps its own stop rule (a deadline on a clock, an attempt count, a
process's uptime), which is why this is a small policy object and not a retry library wrapped
around a call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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


# A background task's step raised: ``failed(task, exc)`` logs and counts it (``logs``).
TaskFailed = Callable[[str, BaseException], None]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Growing delays: ``first_s``, then ``factor`` times the last, never above ``max_s``. Pure."""

    first_s: float
    max_s: float
    factor: float = 2.0

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0: the first retry)."""
        return min(self.first_s * self.factor ** min(retry, 64), self.max_s)


async def run_every(
    clock: Clock,
    interval_s: Callable[[], float],
    step: Callable[[], Awaitable[None]],
    *,
    task: str,
    failed: TaskFailed,
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
