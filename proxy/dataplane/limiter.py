"""In-flight slots per replica and overall, with bounded wait queues served fairly.

A request asks for a slot with a ``pick`` callable: given the current state, it places the
request on a replica that has a free slot (the routing policy over eligible replicas with spare
capacity: a ``Placement`` carrying the replica and the decision's reason), or returns None.
- Fast path: nobody of the request's run is waiting, the overall cap has room and ``pick``
  names a replica: the slot is taken at once, with no allocation beyond the counter updates.
- Otherwise the request joins its run's FIFO (``proxy.dataplane.fair``: one per run, the default
  run's too), or is refused at once when that queue (its share of ``queue_size``) or all of them
  together (``queue_size``) are full. Each ``release`` and each
  fleet change (``wake``) hands freed slots to waiters, each to the run furthest below its
  weighted share of the slots (work-conserving: no slot idles while anyone waits); a waiter
  whose pick finds nothing is skipped, so one request waiting for a busy adapter does not
  block others. A waiter still queued after ``queue_timeout_s`` is refused.
- A request that would queue while no replica can serve it (``fleet.outage``: the fleet dark,
  or every replica serving its model out, for longer than the grace) is refused at once, with
  the replicas' reasons; so are the waiters already queued for it, when the grace ends (a
  timer armed on the pool's changes and on queueing, never on the fast path), instead of
  waiting out ``queue_timeout_s`` to be told no slot became free.
Invariant: ``inflight == sum(replica.inflight)`` over leases granted and not yet released, and
each replica's ``cost`` is the sum of its leases' costs; the limiter is the one writer of
``Replica.inflight``, ``Replica.cost`` and each run's slot count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from proxy.clock import Clock, Timer
from proxy.config import LimitSettings
from proxy.dataplane.fair import FairQueues, Waiter
from proxy.errors import DomainError
from proxy.fleet.outage import Outage
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.runs.run import DEFAULT, Run


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Placement:
    """Where a request goes, why (the routing decision's reason), and its estimated cost."""

    replica: Replica
    reason: str
    cost: float = 1.0
    run: Run = DEFAULT  # whose slot it holds (set by the limiter)


P = TypeVar("P", bound=Placement)
Pick = Callable[[], P | None]

# Waiters examined per wake-up before giving up; bounds the cost of one release.
_SCAN_LIMIT = 64


class Wants(Protocol):
    """What a request asks for (``routing.policy.RouteRequest``): read only if it queues."""

    @property
    def model(self) -> str | None: ...


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
    ) -> None:
        self._settings = settings
        self._outage = outage
        self._clock = clock
        self._waiters = FairQueues()
        self.inflight = 0
        self._members = 0  # the pool's size, as it last told (``follow``)
        self._cap = self.overall_cap()
        self._sweep_timer: Timer | None = None  # when queued requests are judged again
        self._sweep_at = float("inf")

    @property
    def per_replica(self) -> int:
        return self._settings.max_inflight_per_replica

    @property
    def queued(self) -> int:
        return self._waiters.size

    def inflight_of(self, run: Run) -> int:
        """The slots ``run``'s requests hold."""
        return self._waiters.running.get(run, 0)

    def queued_of(self, run: Run) -> int:
        return self._waiters.queued(run)

    def overall_cap(self) -> int:
        cap = self._settings.max_inflight
        return cap if cap is not None else self.per_replica * max(self._members, 1)

    def follow(self, pool: ReplicaPool) -> None:
        """The pool changed (a follower of it): the cap follows its size, and a replica that
        became routable or loaded a version may take a waiter now."""
        self._members = len(pool)
        self.wake()
        if self._waiters.size:
            self._sweep()

    def try_acquire(self, pick: Pick[P], run: Run = DEFAULT) -> P | None:
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

    async def acquire(self, pick: Pick[P], run: Run = DEFAULT, wants: Wants | None = None) -> P:
        """A placement with a slot held for the caller (``run``'s);
        raises Rejected when none can be had. ``wants``: what the request asks for, read only
        if it queues (whether a replica can still serve it)."""
        waiters = self._waiters
        if not waiters.queued(run):
            placed = self.try_acquire(pick, run)
            if placed is not None:
                return placed
        model = wants.model if wants is not None else None
        outage = self._outage
        refusal = outage.refusal(model) if outage is not None else None
        if refusal is not None:
            raise Rejected("no_replica", f"{refusal}; retry when /health answers 200")
        queue_size = self._settings.queue_size
        if waiters.size >= queue_size:
            raise Rejected("queue_full", "the proxy's wait queue is full; retry shortly")
        bound = waiters.bound(run, queue_size)
        if waiters.queued(run) >= bound:  # the default run's bound is the whole queue
            raise Rejected(
                "queue_full",
                f"run {run.name}'s wait queue is full ({bound} requests, its share of the "
                "proxy's queue); retry shortly",
            )
        waiter: Waiter[P] = waiters.push(pick, run, model)
        if outage is not None:
            self._arm(outage.due(model))
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

    def _sweep(self) -> None:
        """Refuse the waiters no replica can serve any more (``fleet.outage``: past the grace)
        and arm the timer for the next one due. Run on the pool's changes and by that timer:
        O(waiters), one judgement per model asked for."""
        outage = self._outage
        self._sweep_at = float("inf")
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        if outage is None:
            return
        judged: dict[str | None, str | None] = {}
        for waiter in self._waiters.every():
            if waiter.future.done():
                continue
            model = waiter.model
            if model not in judged:
                judged[model] = outage.refusal(model)
                self._arm(outage.due(model) if judged[model] is None else None)
            refusal = judged[model]
            if refusal is not None:
                waiter.future.set_exception(
                    Rejected("no_replica", f"{refusal}; retry when /health answers 200")
                )

    def _arm(self, due: float | None) -> None:
        """Sweep the queue again at ``due`` (the monotonic clock's time), if that is sooner."""
        if due is None or due >= self._sweep_at:
            return
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_at = due
        delay = max(due - self._clock.monotonic(), 0.0)
        self._sweep_timer = self._clock.call_later(delay, self._sweep)

    def _expire(self, waiter: Waiter[P]) -> None:
        if not waiter.future.done():
            waiter.future.set_exception(
                Rejected(
                    "queue_timeout",
                    f"no replica slot became free within {self._settings.queue_timeout_s:g} s",
                )
            )
