"""Outlier detection on requests, as Envoy's: what requests' failures may do to a replica.

Two streaks per replica, each written here only:
- ``gateway_streak``: gateway failures in a row (a connect refused, a connection dropped, reset
  or garbled before the answer was whole); ``gateway_failures`` of them eject the replica
  (Envoy's ``consecutive_gateway_failure``, default 5 there too), and the request is sent to
  another replica meanwhile. A connect that timed out is not one: a burst of thousands of new
  connections times some out on a healthy replica; it is load, the request goes elsewhere
  without spending an attempt, and the replica's probes judge it (``dataplane.forward``);
- ``error_streak``: 5xx answers in a row; ``breaker_failures`` of them open the replica's circuit
  (ejected, and kept out for ``breaker_cooldown_s`` whatever its probes say).
A whole answer that is not a 5xx (a Content-Length answer read, a stream to its end) ends both
streaks (``succeeded``): a replica that sends a head and then drops the connection is failing.

Bounds: request failures never eject more than ``max_percent`` of the fleet at once (Envoy's
``max_ejection_percent``, at least one replica): past that a replica is left in routing, on
probation, and said once. The health checker's evidence (``--eject-after`` failed probes) is not
bounded: a replica that is down is ejected whatever the share (``fleet.health``). A replica with
either streak above zero is on probation: the forwarder gives it one request at a time, so one
that fails fast (a refused port answers in microseconds) does not attract the least-loaded
traffic of the whole fleet while its streak builds. Cost: O(1) per request; O(replicas) only
when an ejection is considered.
"""

from __future__ import annotations

import logging

from proxy.fleet.pool import EjectCause, ReplicaPool
from proxy.fleet.replica import Health, Replica

log = logging.getLogger("proxy.fleet")


class Outliers:
    def __init__(
        self,
        pool: ReplicaPool,
        *,
        gateway_failures: int,
        breaker_failures: int,
        breaker_cooldown_s: float,
        max_percent: float,
    ) -> None:
        self._pool = pool
        self.gateway_failures = gateway_failures
        self.breaker_failures = breaker_failures
        self.breaker_cooldown_s = breaker_cooldown_s
        self.max_percent = max_percent
        self._said: set[str] = set()  # replicas spared and said so (once per spell)

    def succeeded(self, replica: Replica) -> None:
        """A whole answer that is not a 5xx."""
        replica.gateway_streak = 0
        replica.error_streak = 0
        self._said.discard(replica.id)

    def gateway_failure(self, replica: Replica, cause: EjectCause, error: str) -> None:
        """A connect refused, a connection dropped or garbled (``cause``)."""
        replica.gateway_streak += 1
        streak = replica.gateway_streak
        if streak < self.gateway_failures or replica.health is not Health.HEALTHY:
            return
        if self._eject(replica, cause, f"{streak} failed requests in a row, the last {error}"):
            replica.gateway_streak = 0

    def server_error(self, replica: Replica, status: int) -> None:
        """A 5xx answer (counted once another replica served the same request)."""
        replica.error_streak += 1
        streak = replica.error_streak
        if streak < self.breaker_failures or replica.health is not Health.HEALTHY:
            return
        cooldown = self.breaker_cooldown_s
        error = (
            f"circuit open after {streak} server errors in a row (last HTTP {status}); "
            f"not readmitted for {cooldown:g} s"
        )
        if self._eject(replica, "circuit", error, cooldown_s=cooldown):
            replica.error_streak = 0

    def room(self) -> int:
        """How many more replicas request failures may eject now (the bound: the module
        docstring)."""
        members = len(self._pool)
        most = max(1, int(members * self.max_percent / 100))
        ejected = sum(1 for r in self._pool if r.health is Health.EJECTED)
        return most - ejected

    def _eject(
        self, replica: Replica, cause: EjectCause, error: str, *, cooldown_s: float = 0.0
    ) -> bool:
        if self.room() <= 0:
            if replica.id not in self._said:
                self._said.add(replica.id)
                log.warning("replica %s not ejected (%s): request failures already eject %g%% "
                            "of the fleet, the most --max-ejection-percent allows; it stays on "
                            "probation (one request at a time) and its probes judge it",
                            replica.id, error, self.max_percent)  # fmt: skip
            return False
        self._pool.eject(replica, cause, error, cooldown_s=cooldown_s)
        return True
