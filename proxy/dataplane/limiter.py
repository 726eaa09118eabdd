"""In-flight slots per replica and overall, with bounded wait queues served fairly.

A request asks for a slot with a ``pick`` callable: given the current state, it places the
request on a replica that has a free slot (the routing policy over eligible replicas with spare
capacity: a ``Placement`` carrying the replica and the decision's reason), or returns None.
- Fast path: nobody of the request's run is waiting, the overall cap has room and ``pick``
  names a replica: the slot is taken at once, with no allocation beyond the counter updates.
- Otherwise the request joins its run's FIFO (``proxy.dataplane.fair``: one per run, the bare
  path one of its own), or is refused at once when that queue (its weighted share of
  ``queue_size``) or all of them together (``queue_size``) are full. Each ``release`` and each
  fleet change (``wake``) hands freed slots to waiters, each to the run furthest below its
  weighted share of the slots (work-conserving: no slot idles while anyone waits); a waiter
  whose pick finds nothing is skipped, so one request waiting for a busy adapter does not
  block others. A waiter still queued after ``queue_timeout_s`` is refused.
- A request that would queue while the fleet is out (``fleet.outage``: no routable replica for
  longer than its grace) is refused at once, with the replicas' reasons.
Invariant: ``inflight == sum(replica.inflight)`` over leases granted and not yet released, and
each replica's ``cost`` is the sum of its leases' costs; the limiter is the one writer of
``Replica.inflight``, ``Replica.cost`` and each run's slot count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from proxy.clock import Clock
from proxy.config import LimitSettings
from proxy.dataplane.fair import FairQueues, Waiter
from proxy.errors import DomainError
from proxy.fleet.outage import Outage
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.runs.table import Runs


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Placement:
    """Where a request goes, why (the routing decision's reason), and its estimated cost."""

    replica: Replica
    reason: str
    cost: float = 1.0
    run: str | None = None  # whose slot it holds (set by the limiter)


P = TypeVar("P", bound=Placement)
Pick = Callable[[], P | None]

# Waiters examined per wake-up before giving up; bounds the cost of one release.
_SCAN_LIMIT = 64


class Rejected(DomainError):
    """No slot can be given: answer 503 with Retry-After."""

    def __init__(self, reason: str, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class Limiter:
    def __init__(
        self,
        settings: LimitSettings,
        clock: Clock,
        outage: Outage | None = None,
        runs: Runs | None = None,
    ) -> None:
        self._settings = settings
        self._outage = outage
        self._clock = clock
        self._waiters = FairQueues(runs)
        self.inflight = 0
        self._members = 0  # the pool's size, as it last told (``follow``)
        self._cap = self.overall_cap()

    @property
    def per_replica(self) -> int:
        return self._settings.max_inflight_per_replica

    @property
    def queued(self) -> int:
        return self._waiters.size

    def inflight_of(self, run: str | None) -> int:
        """The slots ``run``'s requests hold (None: the bare path's)."""
        return self._waiters.running.get(run, 0)

    def queued_of(self, run: str | None) -> int:
        return self._waiters.queued(run)

    def overall_cap(self) -> int:
        cap = self._settings.max_inflight
        return cap if cap is not None else self.per_replica * max(self._members, 1)

    def follow(self, pool: ReplicaPool) -> None:
        """The pool changed (a follower of it): the cap follows its size, and a replica that
        became routable or loaded a version may take a waiter now."""
        self._members = len(pool)
        self.wake()

    def try_acquire(self, pick: Pick[P], run: str | None = None) -> P | None:
        if self.inflight >= self._cap:
            return None
        placed = pick()
        if placed is not None:
            self.inflight += 1
            slots = placed.replica.slots
            slots.inflight += 1
            slots.cost += placed.cost
            placed.run = run
            self._waiters.took(run)
        return placed

    async def acquire(self, pick: Pick[P], run: str | None = None) -> P:
        """A placement with a slot held for the caller (``run``'s: None for the bare path);
        raises Rejected when none can be had."""
        waiters = self._waiters
        if not waiters.queued(run):
            placed = self.try_acquire(pick, run)
            if placed is not None:
                return placed
        refusal = self._outage.refusal() if self._outage is not None else None
        if refusal is not None:
            raise Rejected("no_replica", f"{refusal}; retry when /health answers 200")
        queue_size = self._settings.queue_size
        if waiters.size >= queue_size:
            raise Rejected("queue_full", "the proxy's wait queue is full; retry shortly")
        bound = waiters.bound(run, queue_size)
        if run is not None and waiters.queued(run) >= bound:
            raise Rejected(
                "queue_full",
                f"run {run}'s wait queue is full ({bound} requests, its share of the proxy's "
                "queue); retry shortly",
            )
        waiter: Waiter[P] = waiters.push(pick, run)
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
            waiters.discard(waiter)

    def release(self, placed: Placement) -> None:
        self.inflight -= 1
        self._waiters.gave(placed.run)
        slots = placed.replica.slots
        slots.inflight -= 1
        # Float sums drift; an idle replica's cost is exactly zero again.
        slots.cost = slots.cost - placed.cost if slots.inflight else 0.0
        if self._waiters.size:
            self.wake()

    def wake(self) -> None:
        """Hand free slots to waiters, each to the run furthest below its weighted share and
        FIFO within a run (skipping those whose pick finds nothing)."""
        self._cap = self.overall_cap()
        waiters = self._waiters
        if not waiters.size:
            return
        examined = 0
        for waiter in waiters.candidates():
            if examined >= _SCAN_LIMIT or self.inflight >= self._cap:
                return
            examined += 1
            if waiter.future.done():
                continue
            placed = self.try_acquire(waiter.pick, waiter.run)
            if placed is not None:
                waiters.discard(waiter)
                waiter.future.set_result(placed)

    def _expire(self, waiter: Waiter[P]) -> None:
        if not waiter.future.done():
            waiter.future.set_exception(
                Rejected(
                    "queue_timeout",
                    f"no replica slot became free within {self._settings.queue_timeout_s:g} s",
                )
            )
