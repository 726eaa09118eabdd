"""Injectable time for the deploy commands (they are synchronous: the Hub client blocks).

Waits read a ``Clock`` so tests can run a 30-minute timeout in no time with a fake one.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wall(self) -> float:
        """Seconds since the epoch (for default run names)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wall(self) -> float:
        return time.time()
