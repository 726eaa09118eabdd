"""Failed commands wait before they are tried again: client-go's rate-limited work queue shape.

Each item (a command's key) that fails waits ``backoff.delay(failures - 1)`` from its failure
(``proxy.clock.Backoff``: exponential, capped), counted per item; an item that succeeds is
forgotten, so its next failure starts over. Nothing is ordered by hand: what runs next is the
plan's first command that is ``ready``. Pure: the caller passes the time. O(1) per item, O(n) for
``due``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from proxy.clock import Backoff

K = TypeVar("K", bound=Hashable)


class RetryQueue(Generic[K]):
    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self._waiting: dict[K, tuple[int, float]] = {}  # item -> (failures, not before)

    def __len__(self) -> int:
        return len(self._waiting)

    def failed(self, item: K, now: float) -> int:
        """``item`` failed at ``now``: it waits its backoff. Returns its failures so far."""
        failures = self._waiting.get(item, (0, 0.0))[0] + 1
        self._waiting[item] = (failures, now + self._backoff.delay(failures - 1))
        return failures

    def forget(self, item: K) -> None:
        self._waiting.pop(item, None)

    def clear(self) -> None:
        self._waiting.clear()

    def ready(self, item: K, now: float) -> bool:
        """``item`` may be tried at ``now`` (it never failed, or its backoff has passed)."""
        waiting = self._waiting.get(item)
        return waiting is None or waiting[1] <= now

    def waiting(self, item: K) -> bool:
        return item in self._waiting

    def items(self) -> list[K]:
        return list(self._waiting)

    def due(self) -> float | None:
        """When the first waiting item may be tried (None: none waits)."""
        return min((t for _, t in self._waiting.values()), default=None)
