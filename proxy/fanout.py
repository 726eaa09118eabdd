"""Fan-out of state changes to every routable replica, with one aggregated answer.

- load: all-or-nothing over the replicas that answered; on any failure the replicas that took the
  adapter unload it again (rollback) and the client gets the failing status with every replica's
  outcome. A replica that cannot be reached is ejected instead of failing the call (TRL aborts
  training on a non-200) and gets the fleet's state when it is readmitted.
- unload: a replica that does not have the name (404) is not an error.
- pause / resume / reset_prefix_cache: every replica must answer 200.
Replica error texts are echoed to the client only after secrets are scrubbed from them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
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

    async def load(self, body: bytes) -> web.Response:
        request = _parse_adapter_request(body, need_path=True)
        if isinstance(request, web.Response):
            return request
        name, path = request
        async with self._lock:
            targets = self._targets()
            if isinstance(targets, web.Response):
                return targets
            outcomes = await self.send(targets, "/v1/load_lora_adapter", body)
            took = [o for o in outcomes if o.status == 200]
            failed = [o for o in outcomes if o.reply is not None and o.status != 200]
            if failed or not took:
                await self._rollback(name, took)
                if not failed:
                    return error_response(
                        502,
                        "no replica could be reached to load the adapter",
                        extra={"replicas": [o.describe(self._secrets) for o in outcomes]},
                    )
                note = f" (rolled back on {len(took)})" if took else ""
                return self._aggregate_error("load_lora_adapter", outcomes, failed, note)
            for outcome in took:
                outcome.replica.adapters[name] = path
            self._fleet.adapters[name] = path
            self._fleet.changed()
            return _passthrough(took[0].reply)

    async def _rollback(self, name: str, took: list[Outcome]) -> None:
        if not took:
            return
        body = orjson.dumps({"lora_name": name})
        undone = await self.send(tuple(o.replica for o in took), "/v1/unload_lora_adapter", body)
        for outcome in undone:
            if outcome.status == 200:
                outcome.replica.adapters.pop(name, None)
            else:
                log.error(
                    "rollback of %s on %s failed: %s",
                    name,
                    outcome.replica.id,
                    outcome.describe(self._secrets),
                )

    async def unload(self, body: bytes) -> web.Response:
        request = _parse_adapter_request(body, need_path=False)
        if isinstance(request, web.Response):
            return request
        name, _ = request
        async with self._lock:
            targets = self._targets()
            if isinstance(targets, web.Response):
                return targets
            outcomes = await self.send(targets, "/v1/unload_lora_adapter", body)
            for outcome in outcomes:
                if outcome.status in (200, 404):
                    outcome.replica.adapters.pop(name, None)
            self._fleet.adapters.pop(name, None)
            self._fleet.changed()
            failed = [o for o in outcomes if o.reply is not None and o.status not in (200, 404)]
            if failed:
                return self._aggregate_error("unload_lora_adapter", outcomes, failed)
            done = [o for o in outcomes if o.status == 200]
            if done:
                return _passthrough(done[0].reply)
            answered = [o for o in outcomes if o.reply is not None]
            if answered:
                return _passthrough(answered[0].reply)
            return error_response(502, "no replica could be reached to unload the adapter")

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


def _parse_adapter_request(body: bytes, *, need_path: bool) -> tuple[str, str] | web.Response:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return error_response(400, f"request body is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return error_response(400, "request body must be a JSON object")
    name, path = data.get("lora_name"), data.get("lora_path", "")
    if not isinstance(name, str) or not name:
        return error_response(400, "'lora_name' must be a non-empty string", param="lora_name")
    if need_path and (not isinstance(path, str) or not path):
        return error_response(400, "'lora_path' must be a non-empty string", param="lora_path")
    return name, path if isinstance(path, str) else ""


def _passthrough(reply: Reply | None) -> web.Response:
    assert reply is not None
    return web.Response(
        status=reply.status,
        body=reply.body,
        headers={"Content-Type": reply.content_type or "application/octet-stream"},
    )
