"""Fan-out of ``/pause``, ``/resume`` and ``/reset_prefix_cache`` to every routable replica.

Every replica must answer 200; the edge turns the outcomes into one aggregated answer
(``proxy.http.responses.Redactor.control_answer``). A replica that cannot be reached is ejected
instead of failing the call (TRL aborts training on a non-200 from pause or resume) and gets the
fleet's state when it is readmitted. State changes are applied one at a time, in arrival order.
Adapter loads and unloads have their own service (``proxy.adapters``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.fleet.sync import FleetSync
from proxy.metrics.recorder import Metrics
from proxy.upstream.client import Reply, UpstreamClient
from proxy.upstream.errors import TRANSPORT_ERRORS, is_local


@dataclass(frozen=True, slots=True)
class Outcome:
    replica: Replica
    reply: Reply | None  # None: unreachable (ejected)
    error: str = ""

    @property
    def status(self) -> int | None:
        return self.reply.status if self.reply is not None else None


class FanOut:
    def __init__(
        self, pool: ReplicaPool, client: UpstreamClient, fleet: FleetSync, metrics: Metrics
    ) -> None:
        self._pool = pool
        self._client = client
        self._fleet = fleet
        self._metrics = metrics
        self._lock = asyncio.Lock()  # state changes are applied one at a time, in order

    async def send(
        self, targets: tuple[Replica, ...], path_qs: str, body: bytes | None
    ) -> list[Outcome]:
        return list(await asyncio.gather(*(self._one(r, path_qs, body) for r in targets)))

    async def _one(self, replica: Replica, path_qs: str, body: bytes | None) -> Outcome:
        try:
            reply = await self._client.call(replica, "POST", path_qs, body=body)
        except TRANSPORT_ERRORS as exc:
            if is_local(exc):  # the proxy's own limit, not the replica's fault: no ejection
                return Outcome(replica, None, f"not sent: the proxy ran out of resources ({exc})")
            error = f"unreachable ({type(exc).__name__}) during {path_qs.split('?')[0]}"
            self._pool.eject(replica, "fanout", error)
            return Outcome(replica, None, f"{error}; ejected until it recovers")
        return Outcome(replica, reply)

    async def control(self, path: str, query: str) -> list[Outcome]:
        """``/pause``, ``/resume`` or ``/reset_prefix_cache`` on every routable replica.

        Raises ``NoReplica`` when none is routable."""
        path_qs = path + (f"?{query}" if query else "")
        async with self._lock:
            targets = self._pool.require_routable()
            started = time.perf_counter()
            outcomes = await self.send(targets, path_qs, None)
            self._metrics.record_control(path.lstrip("/"), time.perf_counter() - started)
            paused = self._fleet.control_applied(path, query)
            if paused is not None:
                self._metrics.record_paused_window(paused)
            return outcomes
