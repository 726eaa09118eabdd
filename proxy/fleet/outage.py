"""An outage: no routable replica can serve a request, for longer than a grace.

Without it a request that finds no replica waits the whole ``--queue-timeout`` (60 s) and learns
nothing, or is blamed on slots. Two kinds:
- the fleet is dark: no replica is routable at all (``ReplicaPool.dark_since``);
- a model is stranded: every replica that serves it (its base model, or an adapter it holds) is
  out while routable ones cannot serve it (their base models differ). A model no replica holds
  yet is not stranded: it is a version on its way (the fleet is loading it).
Past the grace a request for it that would queue is refused at once (503), its message naming
each replica and its reason (``no replica is ready: http://h:9199 (probe failed: connection
refused)``), and those already queued for it are refused at that moment (the limiter asks
``due`` when to look again). The grace spares a blip: the first probe round at start, a replica
restarting while the others are ejected for a moment. TRL's load, pause and resume, which TRL
does not retry, wait a blip out (``ReplicaPool.wait_routable``) instead of being answered 503.

Cost: the outage follows the pool (told of every change of the routable set and the adapters
held); the limiter asks only for a request that would queue, never on its fast path. A stranded
model is noted when a queued request asks for it, and forgotten when a replica can serve it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from proxy.clock import Clock
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica

log = logging.getLogger("proxy.fleet")

_NAMED = 4  # replicas named in a refusal; the rest are counted


class Outage:
    """Whether a request that would queue (or waits) is refused now; the pool owns when the
    fleet went dark and the grace (``ReplicaPool.dark_since``, ``grace_s``), this object when
    each stranded model was first seen stranded."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._pool: ReplicaPool | None = None  # as it last told
        self._said = False  # this outage's WARNING line has been logged
        self._stranded: dict[str, float] = {}  # model -> since when no replica can serve it
        self._said_models: set[str] = set()

    def follow(self, pool: ReplicaPool) -> None:
        """The pool changed (a follower of it)."""
        self._pool = pool
        if pool.routable():
            self._said = False
        for model in [m for m in self._stranded if self._holders(pool, m) is None]:
            del self._stranded[model]
            self._said_models.discard(model)

    def refusal(self, model: str | None = None) -> str | None:
        """Why a request for ``model`` that would queue (or waits) is refused now; None while
        it may wait."""
        pool = self._pool
        if pool is None:
            return None
        if pool.in_outage():
            message = self.describe()
            if not self._said:
                self._said = True
                log.warning("%s: requests are answered 503 at once until one is", message)
            return message
        due = self.due(model)
        if due is None or self._clock.monotonic() < due or model is None:
            return None
        holders = self._holders(pool, model) or ()
        message = f"no replica that serves {model} is ready: {_listed(holders)}"
        if model not in self._said_models:
            self._said_models.add(model)
            log.warning("%s: its requests are answered 503 at once until one is", message)
        return message

    def due(self, model: str | None) -> float | None:
        """When a request for ``model`` is refused if nothing changes (the monotonic clock's
        time); None while a replica can serve it."""
        pool = self._pool
        if pool is None:
            return None
        if pool.dark_since is not None:
            return pool.dark_since + pool.grace_s
        if model is None or self._holders(pool, model) is None:
            return None
        since = self._stranded.setdefault(model, self._clock.monotonic())
        return since + pool.grace_s

    def describe(self) -> str:
        replicas = list(self._pool or ())
        if not replicas:
            return "no replica is configured"
        return f"no replica is ready: {_listed(replicas)}"

    @staticmethod
    def _holders(pool: ReplicaPool, model: str) -> list[Replica] | None:
        """The replicas that serve ``model``, all out, when no routable one can serve it;
        None when one can (or none holds it: a version on its way)."""
        if any(r.base_model is None or r.serves(model) for r in pool.routable()):
            return None
        holders = [r for r in pool if r.serves(model)]
        return holders or None


def _listed(replicas: Iterable[Replica]) -> str:
    replicas = list(replicas)
    named = [f"{r.url} ({r.last_error or r.state})" for r in replicas[:_NAMED]]
    more = len(replicas) - _NAMED
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")
