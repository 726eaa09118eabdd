"""An outage: the fleet has had no routable replica for longer than a grace.

Without it a request that finds no replica waits the whole ``--queue-timeout`` (60 s) and learns
nothing. Past the grace a request that would queue is refused at once (503), its message naming
each replica and its reason (``no replica is ready: http://h:9199 (probe failed: connection
refused)``). The grace spares a blip: the first probe round at start, a replica restarting while
the others are ejected for a moment; a request queued before the outage is declared keeps its
full queue timeout. TRL's load, pause and resume, which TRL does not retry, wait a blip out
(``ReplicaPool.wait_routable``) instead of being answered 503 in it.

Cost: the outage follows the pool (told of every change of the routable set: when it starts and
ends); the limiter asks only for a request that would queue, never on its fast path.
"""

from __future__ import annotations

import logging

from proxy.fleet.pool import ReplicaPool

log = logging.getLogger("proxy.fleet")

_NAMED = 4  # replicas named in a refusal; the rest are counted


class Outage:
    """Whether a request that would queue is refused now; the pool owns when the fleet went
    dark and the grace (``ReplicaPool.dark_since``, ``grace_s``)."""

    def __init__(self) -> None:
        self._pool: ReplicaPool | None = None  # as it last told
        self._said = False  # this outage's WARNING line has been logged

    def follow(self, pool: ReplicaPool) -> None:
        """The pool changed (a follower of it)."""
        self._pool = pool
        if pool.routable():
            self._said = False

    def refusal(self) -> str | None:
        """Why a request that would queue is refused now; None while it may wait."""
        if self._pool is None or not self._pool.in_outage():
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
