"""An outage: the fleet has had no routable replica for longer than a grace.

Without it a request that finds no replica waits the whole ``--queue-timeout`` (60 s) and learns
nothing. Past the grace a request that would queue is refused at once (503), its message naming
each replica and its reason (``no replica is ready: http://h:9199 (probe failed: connection
refused)``). The grace spares a blip: the first probe round at start, a replica restarting while
the others are ejected for a moment; a request queued before the outage is declared keeps its
full queue timeout.

Cost: the outage follows the pool (told of every change of the routable set: when it starts and
ends); the limiter asks only for a request that would queue, never on its fast path.
"""

from __future__ import annotations

import logging

from proxy.clock import Clock
from proxy.fleet.pool import ReplicaPool

log = logging.getLogger("proxy.fleet")

NO_REPLICA_GRACE_S = 10.0  # ten probe rounds at the default --health-interval (1 s)
_NAMED = 4  # replicas named in a refusal; the rest are counted


class Outage:
    def __init__(self, clock: Clock, grace_s: float = NO_REPLICA_GRACE_S):
        self._clock = clock
        self.grace_s = grace_s
        self._pool: ReplicaPool | None = None  # as it last told
        self._since: float | None = None  # when the routable set became empty
        self._said = False  # this outage's WARNING line has been logged

    def follow(self, pool: ReplicaPool) -> None:
        """The pool changed (a follower of it)."""
        self._pool = pool
        if pool.routable():
            self._since, self._said = None, False
        elif self._since is None:
            self._since = self._clock.monotonic()

    def refusal(self) -> str | None:
        """Why a request that would queue is refused now; None while it may wait."""
        since = self._since
        if since is None or self._clock.monotonic() - since < self.grace_s:
            return None
        message = self.describe()
        if not self._said:
            self._said = True
            log.warning("%s: requests are answered 503 at once until one is", message)
        return message

    def describe(self) -> str:
        replicas = list(self._pool or ())
        if not replicas:
            return "no replica is configured"
        named = [f"{r.url} ({r.last_error or r.state})" for r in replicas[:_NAMED]]
        more = len(replicas) - _NAMED
        listed = ", ".join(named) + (f" and {more} more" if more > 0 else "")
        return f"no replica is ready: {listed}"
