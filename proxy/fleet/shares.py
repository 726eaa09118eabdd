"""Each run's share of the fleet's ``max_loras``, said when the fleet's figures are known.

A follower of the pool (``ReplicaPool``: told of every change, a replica's server info among
them): when the fleet's smallest ``max_loras`` (what every run's share is cut from) or the runs'
weights differ from what it last said, it logs one line per run (``runs.staleness``: WARNING for
a share below what TRL's default ``max_staleness`` needs, naming what to change; INFO otherwise).
``warnings()`` is what the status page and the advisor say meanwhile. Cost: O(replicas) per
change of the pool; nothing on the request path. A run declared through the admin API is said at
the pool's next change (each replica's info refresh is one); the status page shows it at once.
"""

from __future__ import annotations

import logging

from proxy.fleet.info import max_loras
from proxy.fleet.pool import ReplicaPool
from proxy.runs.staleness import share_line
from proxy.runs.table import Runs

log = logging.getLogger("proxy.runs")


class RunShares:
    def __init__(self, runs: Runs) -> None:
        self._runs = runs
        self._max_loras: int | None = None  # the fleet's smallest, as the pool last told
        self._said: tuple[int, tuple[tuple[str, float], ...]] | None = None

    def follow(self, pool: ReplicaPool) -> None:
        """The pool changed (a follower of it)."""
        limits = [m for m in map(max_loras, pool) if m is not None]
        self._max_loras = min(limits) if limits else None
        if self._max_loras is None or not self._runs:
            return
        said = (self._max_loras, tuple(self._runs.weights().items()))
        if said != self._said:
            self._said = said
            for short, line in self._lines().values():
                log.log(logging.WARNING if short else logging.INFO, line)

    def warnings(self) -> dict[str, str]:
        """Each run whose share is below what TRL's default ``max_staleness`` needs: its line."""
        return {name: line for name, (short, line) in self._lines().items() if short}

    def _lines(self) -> dict[str, tuple[bool, str]]:
        if self._max_loras is None:
            return {}
        return {run.name: share_line(self._runs, run.name, self._max_loras) for run in self._runs}
