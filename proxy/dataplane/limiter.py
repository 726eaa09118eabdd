"""In-flight slots per replica and overall, with a bounded FIFO wait queue.

A request asks for a slot with a ``pick`` callable: given the current state, it places the
request on a replica that has a free slot (the routing policy over eligible replicas with spare
capacity: a ``Placement`` carrying the replica and the decision's reason), or returns None.
- Fast path: nobody is waiting, the overall cap has room and ``pick`` names a replica: the slot is
  taken at once, with no allocation beyond the counter updates.
- Otherwise the request joins the FIFO queue (or is refused at once when the queue is full).
  Each ``release`` and each fleet change (``wake``) hands freed slots to waiters in arrival
  order; a waiter whose pick finds nothing is skipped, so one request waiting for a busy adapter
  does not block others. A waiter still queued after ``queue_timeout_s`` is refused.
- A request that would queue while the fleet is out (``fleet.outage``: no routable replica for
  longer than its grace) is refused at once, with the replicas' reasons.
Invariant: ``inflight == sum(replica.inflight)`` over leases granted and not yet released, and
each replica's ``cost`` is the sum of its leases' costs; the limiter is the one writer of
``Replica.inflight`` and ``Replica.cost``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from proxy.clock import Clock
from proxy.config import LimitSettings
from proxy.fleet.outage import Outage
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Placement:
    """Where a request goes, why (the routing decision's reason), and its estimated cost."""

    replica: Replica
    reason: str
    cost: float = 1.0


P = TypeVar("P", bound=Placement)
Pick = Callable[[], P | None]

# Waiters examined per wake-up before giving up; bounds the cost of one release.
_SCAN_LIMIT = 64


class Rejected(Exception):
    """No slot can be given: answer 503 with Retry-After."""

    def __init__(self, reason: str, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass(eq=False, slots=True)
class _Waiter(Generic[P]):
    pick: Pick[P]
    future: asyncio.Future[P] = field(default_factory=asyncio.Future)


class Limiter:
    def __init__(
        self,
        settings: LimitSettings,
        pool: ReplicaPool,
        clock: Clock,
        outage: Outage | None = None,
    ) -> None:
        self._settings = settings
        self._outage = outage
        self._pool = pool
        self._clock = clock
        self._waiters: deque[_Waiter[Any]] = deque()
        self.inflight = 0
        self._cap = self.overall_cap()
        pool.listen(on_change=self.wake)  # a fleet change may free slots or move the cap

    @property
    def per_replica(self) -> int:
        return self._settings.max_inflight_per_replica

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def overall_cap(self) -> int:
        cap = self._settings.max_inflight
        return cap if cap is not None else self.per_replica * max(len(self._pool), 1)

    def try_acquire(self, pick: Pick[P]) -> P | None:
        if self.inflight >= self._cap:
            return None
        placed = pick()
        if placed is not None:
            self.inflight += 1
            placed.replica.inflight += 1
            placed.replica.cost += placed.cost
        return placed

    async def acquire(self, pick: Pick[P]) -> P:
        """A placement with a slot held for the caller; raises Rejected when none can be had."""
        if not self._waiters:
            placed = self.try_acquire(pick)
            if placed is not None:
                return placed
        refusal = self._outage.refusal() if self._outage is not None else None
        if refusal is not None:
            raise Rejected("no_replica", f"{refusal}; retry when /health answers 200")
        if len(self._waiters) >= self._settings.queue_size:
            raise Rejected("queue_full", "the proxy's wait queue is full; retry shortly")
        waiter: _Waiter[P] = _Waiter(pick)
        self._waiters.append(waiter)
        timer = self._clock.call_later(self._settings.queue_timeout_s, lambda: self._expire(waiter))
        try:
            return await waiter.future
        except asyncio.CancelledError:
            # The client left while queued; if a slot was granted in the same tick, give it back.
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                self.release(future.result())
            raise
        finally:
            timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self, placed: Placement) -> None:
        self.inflight -= 1
        replica = placed.replica
        replica.inflight -= 1
        # Float sums drift; an idle replica's cost is exactly zero again.
        replica.cost = replica.cost - placed.cost if replica.inflight else 0.0
        if self._waiters:
            self.wake()

    def wake(self) -> None:
        """Hand free slots to waiters in FIFO order (skipping those whose pick finds nothing).

        Also called on every fleet change, so the overall cap follows the pool's size."""
        self._cap = self.overall_cap()
        examined = 0
        for waiter in tuple(self._waiters):
            if examined >= _SCAN_LIMIT or self.inflight >= self._cap:
                return
            examined += 1
            if waiter.future.done():
                continue
            placed = self.try_acquire(waiter.pick)
            if placed is not None:
                self._waiters.remove(waiter)
                waiter.future.set_result(placed)

    def _expire(self, waiter: _Waiter[P]) -> None:
        if not waiter.future.done():
            waiter.future.set_exception(
                Rejected(
                    "queue_timeout",
                    f"no replica slot became free within {self._settings.queue_timeout_s:g} s",
                )
            )
