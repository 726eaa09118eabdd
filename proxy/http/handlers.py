"""Thin HTTP handlers: authenticate, read, classify, delegate, record, answer.

Route classes: generation (routed to one replica), fan-out (every routable replica), aggregated
(answered from the fleet's state), passthrough (an allowlist of vLLM's public routes, to one
healthy replica), and the proxy's own ``/metrics`` and ``/proxy/status``. Services return
outcomes or raise domain errors; each is turned into an answer here, through
``proxy.http.responses``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.service import AdapterService, BadAdapterRequest
from proxy.dataplane.fanout import FanOut
from proxy.dataplane.forward import Forwarder, NoAnswer, UpstreamTimeout
from proxy.dataplane.limiter import Limiter, Rejected
from proxy.fleet import views
from proxy.fleet.pool import NoReplica, ReplicaPool
from proxy.fleet.sync import FleetSync
from proxy.http import responses
from proxy.http.auth import KeyCheck
from proxy.http.responses import Redactor, error_response, json_response
from proxy.metrics import Metrics
from proxy.routing.peek import BadBody, peek_generation
from proxy.routing.policy import Policy, RouteRequest

ROUTING_KEY_HEADERS = ("X-Routing-Key", "X-Session-ID")


@dataclass(slots=True)
class Handlers:
    pool: ReplicaPool
    fleet: FleetSync
    limiter: Limiter
    forwarder: Forwarder
    fanout: FanOut
    adapters: AdapterService
    metrics: Metrics
    api_key: KeyCheck
    max_body_bytes: int
    policy: Policy
    redactor: Redactor

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
            return responses.too_large(self.max_body_bytes)

    def generation(self, route: str, prompt_key: bytes) -> Handler:
        forward = self._forward

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
                return responses.model_not_found(model)
            headers = request.headers
            key = headers.get(ROUTING_KEY_HEADERS[0]) or headers.get(ROUTING_KEY_HEADERS[1])
            keys = () if key is not None else self.policy.route_keys(peek, model)
            return await forward(request, route, body, RouteRequest(model, key, keys))

        return handle

    async def _forward(
        self, request: web.Request, route: str, body: bytes, facts: RouteRequest
    ) -> web.StreamResponse:
        try:
            return await self.forwarder.forward(request, route, body, facts)
        except Rejected as exc:
            self.metrics.record_rejection(exc.reason)
            return responses.rejected(str(exc), exc.retry_after_s)
        except NoAnswer as exc:
            return responses.no_answer(self.redactor.text(str(exc)))
        except UpstreamTimeout as exc:
            return responses.upstream_timeout(str(exc))

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        return await self._forward(request, "passthrough", body, RouteRequest(None))

    async def load(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        try:
            result = await self.adapters.load(body)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        except NoReplica:
            return responses.no_replica()
        return self.redactor.load_answer(result)

    async def unload(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        try:
            result = await self.adapters.unload(body)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        return responses.unload_answer(result)

    async def control(self, request: web.Request) -> web.StreamResponse:
        try:
            outcomes = await self.fanout.control(request.path, request.query_string)
        except NoReplica:
            return responses.no_replica()
        return self.redactor.control_answer(request.path, outcomes)

    async def health(self, request: web.Request) -> web.StreamResponse:
        status, body = views.health(self.pool)
        return json_response(status, body)

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        info = views.server_info(self.pool)
        if info is None:
            return responses.not_reported("reported its server info")
        return json_response(200, info)

    async def models(self, request: web.Request) -> web.StreamResponse:
        listing = views.models(self.pool)
        if listing is None:
            return responses.not_reported("listed its models")
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
                "paused": self.fleet.paused,
                "adapters": self.adapters.status(),
                "replicas": [views.replica_status(r) for r in self.pool],
                "tasks": len(asyncio.all_tasks()),
            },
        )
