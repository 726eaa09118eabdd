"""The circuit breaker: consecutive 5xx answers to generation requests open a replica's circuit.

``failures`` server errors in a row eject the replica (cause ``circuit``) and keep it out for
``cooldown_s`` (the pool's clock), however its health probes look; any other answer closes the
count. The streak (``Replica.error_streak``) has this one writer.
"""

from __future__ import annotations

import logging

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health, Replica

log = logging.getLogger("proxy.fleet")


class Breaker:
    def __init__(self, pool: ReplicaPool, failures: int, cooldown_s: float) -> None:
        self._pool = pool
        self.failures = failures
        self.cooldown_s = cooldown_s

    def answered(self, replica: Replica) -> None:
        """A non-5xx answer: the streak starts over."""
        replica.error_streak = 0

    def server_error(self, replica: Replica, status: int) -> None:
        """Count a 5xx; ``failures`` in a row open the circuit."""
        replica.error_streak += 1
        if replica.error_streak < self.failures or replica.health is not Health.HEALTHY:
            return
        streak, replica.error_streak = replica.error_streak, 0
        self._pool.eject(
            replica,
            "circuit",
            f"circuit open after {streak} server errors in a row (last HTTP {status}); "
            f"not readmitted for {self.cooldown_s:g} s",
            cooldown_s=self.cooldown_s,
        )
