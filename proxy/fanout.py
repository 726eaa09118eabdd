"""Fan-out of ``/pause``, ``/resume`` and ``/reset_prefix_cache`` to every routable replica.

Every replica must answer 200; the client gets one aggregated answer. A replica that cannot be
reached is ejected instead of failing the call (TRL aborts training on a non-200 from pause or
resume) and gets the fleet's state when it is readmitted. Adapter loads and unloads have their
own service (``proxy.adapters``). Replica error texts are echoed only after secrets are scrubbed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from proxy.client import TRANSPORT_ERRORS, Reply, UpstreamClient
from proxy.errors import error_response
from proxy.fleet import Fleet
from proxy.logs import redact
from proxy.metrics import Metrics
from proxy.upstreams import Health, Replica, ReplicaPool

log = logging.getLogger("proxy.fanout")

_ECHO_LIMIT = 400  # characters of a replica's error text echoed back


@dataclass(frozen=True, slots=True)
class Outcome:
    replica: Replica
    reply: Reply | None  # None: unreachable (ejected)
    error: str = ""

    @property
    def status(self) -> int | None:
        return self.reply.status if self.reply is not None else None

    def describe(self, secrets: tuple[str, ...]) -> dict[str, Any]:
        if self.reply is None:
            return {"replica": self.replica.id, "status": None, "error": self.error}
        text = redact(self.reply.body.decode("utf-8", "replace")[:_ECHO_LIMIT], secrets)
        return {"replica": self.replica.id, "status": self.reply.status, "body": text}


class FanOut:
    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        fleet: Fleet,
        metrics: Metrics,
        secrets: tuple[str, ...],
    ) -> None:
        self._pool = pool
        self._client = client
        self._fleet = fleet
        self._metrics = metrics
        self._secrets = secrets
        self._lock = asyncio.Lock()  # state changes are applied one at a time, in order

    async def send(
        self, targets: tuple[Replica, ...], path_qs: str, body: bytes | None
    ) -> list[Outcome]:
        return list(await asyncio.gather(*(self._one(r, path_qs, body) for r in targets)))

    async def _one(self, replica: Replica, path_qs: str, body: bytes | None) -> Outcome:
        try:
            reply = await self._client.call(replica, "POST", path_qs, body=body)
        except TRANSPORT_ERRORS as exc:
            error = f"unreachable ({type(exc).__name__}); ejected until it recovers"
            log.warning("replica %s %s during %s", replica.id, error, path_qs)
            self._pool.set_health(replica, Health.EJECTED, error)
            self._metrics.record_ejection("fanout")
            return Outcome(replica, None, error)
        return Outcome(replica, reply)

    def _targets(self) -> tuple[Replica, ...] | web.Response:
        targets = self._pool.routable()
        if not targets:
            return error_response(
                503,
                "no replica is available; retry when /health answers 200",
                headers={"Retry-After": "1"},
            )
        return targets

    def _aggregate_error(
        self, action: str, outcomes: list[Outcome], failed: list[Outcome], note: str = ""
    ) -> web.Response:
        statuses = Counter(o.status for o in failed if o.status is not None)
        status = statuses.most_common(1)[0][0] if statuses else 502
        first = failed[0].describe(self._secrets)
        detail = first.get("body") or first.get("error")
        message = (
            f"{action} failed on {len(failed)} of {len(outcomes)} replicas{note}; "
            f"{first['replica']} answered {first['status']}: {detail}"
        )
        return error_response(
            status, message, extra={"replicas": [o.describe(self._secrets) for o in outcomes]}
        )

    async def control(self, path: str, query: str) -> web.Response:
        """``/pause``, ``/resume`` or ``/reset_prefix_cache`` on every routable replica."""
        path_qs = path + (f"?{query}" if query else "")
        async with self._lock:
            targets = self._targets()
            if isinstance(targets, web.Response):
                return targets
            outcomes = await self.send(targets, path_qs, None)
            if path == "/pause":
                self._fleet.pause_query = f"?{query}" if query else ""
            elif path == "/resume":
                self._fleet.pause_query = None
            self._fleet.changed()
            failed = [o for o in outcomes if o.reply is not None and o.status != 200]
            if failed:
                return self._aggregate_error(path.lstrip("/"), outcomes, failed)
            done = [o for o in outcomes if o.reply is not None]
            if not done:
                return error_response(502, f"no replica could be reached for {path}")
            return _passthrough(done[0].reply)


def _passthrough(reply: Reply | None) -> web.Response:
    assert reply is not None
    return web.Response(
        status=reply.status,
        body=reply.body,
        headers={"Content-Type": reply.content_type or "application/octet-stream"},
    )
