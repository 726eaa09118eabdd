"""Thin HTTP handlers: authenticate, read, classify, delegate, record.

Route classes: generation (routed to one replica), fan-out (every routable replica), aggregated
(answered from the fleet's state), passthrough (an allowlist of vLLM's public routes, to one
healthy replica), and the proxy's own ``/metrics`` and ``/proxy/status``. Routes outside the
allowlist are not registered, so aiohttp answers 404 for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from aiohttp import web

from proxy import aggregate
from proxy.adapters.service import AdapterService
from proxy.auth import KeyCheck
from proxy.errors import error_response, model_not_found
from proxy.fanout import FanOut
from proxy.fleet import Fleet
from proxy.forward import Forwarder
from proxy.limiter import Limiter, Rejected
from proxy.metrics import Metrics
from proxy.peek import BadBody, peek_generation
from proxy.routing import Policy, RouteRequest
from proxy.upstreams import ReplicaPool

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ROUTING_KEY_HEADERS = ("X-Routing-Key", "X-Session-ID")


def json_response(status: int, payload: object) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")


@dataclass(slots=True)
class Handlers:
    pool: ReplicaPool
    fleet: Fleet
    limiter: Limiter
    forwarder: Forwarder
    fanout: FanOut
    adapters: AdapterService
    metrics: Metrics
    api_key: KeyCheck
    max_body_bytes: int
    policy: Policy

    def guarded(self, route: str, handler: Handler, *, open_route: bool = False) -> Handler:
        """Wrap ``handler`` with the inbound key check and request metrics."""
        api_key, metrics = self.api_key, self.metrics

        async def run(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            if not open_route and not api_key.allows(request):
                metrics.record_rejection("unauthorized")
                response: web.StreamResponse = api_key.refusal()
            else:
                response = await handler(request)
            metrics.record_request(route, response.status, time.perf_counter() - started)
            return response

        return run

    async def _read(self, request: web.Request) -> bytes | web.Response:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.metrics.record_rejection("too_large")
            return error_response(
                413,
                f"request body is larger than the proxy's limit of {self.max_body_bytes} "
                "bytes (--max-body-bytes)",
            )

    def generation(self, route: str, prompt_key: bytes) -> Handler:
        forward = self.forwarder.forward

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await self._read(request)
            if isinstance(body, web.Response):
                return body
            try:
                peek = peek_generation(body, prompt_key)
            except BadBody as exc:
                self.metrics.record_rejection("bad_request")
                return error_response(400, str(exc), param=exc.param)
            model = peek.model
            if model is not None and self.fleet.unknown(model):
                self.metrics.record_rejection("unknown_model")
                return model_not_found(model)
            headers = request.headers
            key = headers.get(ROUTING_KEY_HEADERS[0]) or headers.get(ROUTING_KEY_HEADERS[1])
            keys = () if key is not None else self.policy.route_keys(peek, model)
            try:
                return await forward(request, route, body, RouteRequest(model, key, keys))
            except Rejected as exc:
                return self._rejected(exc)

        return handle

    def _rejected(self, exc: Rejected) -> web.Response:
        self.metrics.record_rejection(exc.reason)
        return error_response(503, str(exc), headers={"Retry-After": str(exc.retry_after_s)})

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        try:
            return await self.forwarder.forward(request, "passthrough", body, RouteRequest(None))
        except Rejected as exc:
            return self._rejected(exc)

    async def load(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        return body if isinstance(body, web.Response) else await self.adapters.load(body)

    async def unload(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        return body if isinstance(body, web.Response) else await self.adapters.unload(body)

    async def control(self, request: web.Request) -> web.StreamResponse:
        return await self.fanout.control(request.path, request.query_string)

    async def health(self, request: web.Request) -> web.StreamResponse:
        status, body = aggregate.health(self.pool)
        return json_response(status, body)

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        info = aggregate.server_info(self.pool)
        if info is None:
            return error_response(
                503,
                "no routable replica has reported its server info yet",
                headers={"Retry-After": "1"},
            )
        return json_response(200, info)

    async def models(self, request: web.Request) -> web.StreamResponse:
        listing = aggregate.models(self.pool)
        if listing is None:
            return error_response(
                503, "no routable replica has listed its models yet", headers={"Retry-After": "1"}
            )
        return json_response(200, listing)

    async def metrics_page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def status(self, request: web.Request) -> web.StreamResponse:
        return json_response(
            200,
            {
                "policy": self.policy.name,
                "routing": self.policy.stats(),
                "inflight": self.limiter.inflight,
                "queued": self.limiter.queued,
                "max_inflight": self.limiter.overall_cap(),
                "max_inflight_per_replica": self.limiter.per_replica,
                "paused": self.fleet.pause_query is not None,
                "adapters": self.adapters.status(),
                "replicas": [aggregate.replica_status(r) for r in self.pool],
                "tasks": len(asyncio.all_tasks()),
            },
        )
