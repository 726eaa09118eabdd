"""Thin HTTP handlers: authenticate, read, classify, delegate, record, answer.

Route classes: generation (routed to one replica), fan-out (every routable replica), aggregated
(answered from the fleet's state), passthrough (an allowlist of vLLM's public routes, to one
healthy replica), and the proxy's own ``/metrics`` and ``/proxy/status``. Services return
outcomes or raise domain errors; each is turned into an answer here, through
``proxy.http.responses``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import xxhash
from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.service import AdapterService, BadAdapterRequest
from proxy.config import ClientSettings
from proxy.dataplane.fanout import FanOut
from proxy.dataplane.forward import (
    REPLICA_HEADER,
    Forwarder,
    Identity,
    NoAnswer,
    UpstreamTimeout,
)
from proxy.dataplane.limiter import Limiter, Rejected
from proxy.fleet import views
from proxy.fleet.pool import NoReplica, ReplicaPool
from proxy.fleet.sync import FleetSync
from proxy.http import responses
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BodyBudget
from proxy.http.identity import IDENTITY, REQUEST_ID, Identities
from proxy.http.responses import Redactor, error_response, json_response
from proxy.http.server import Guard
from proxy.http.tracing import Spans
from proxy.insight.sampler import Sampler
from proxy.metrics.recorder import Metrics
from proxy.routing.cost import CostModel, decode_budget, estimate_prompt_tokens
from proxy.routing.peek import BadBody, Peek, peek_generation, prompt_tokens
from proxy.routing.policy import Policy, RouteRequest
from proxy.routing.reuse import ReuseEstimator
from proxy.supervise import restarts_so_far
from proxy.upstream.errors import LocalResourceError

ROUTING_KEY_HEADERS = ("X-Routing-Key", "X-Session-ID")
SINGLE_PROMPTS = ("tokens", "text", "messages")
CONVERSATION_BYTES = 2048
STARTED = time.monotonic()  # when this process began serving (the status page's uptime)

log = logging.getLogger("proxy.http")
access_log = logging.getLogger("proxy.access")


def _conversation(peek: Peek, keys: tuple[int, ...]) -> int:
    """What samples a prompt for the reuse estimate: its routing key (one per conversation),
    or, under a policy that makes none, a hash of its first ``CONVERSATION_BYTES``."""
    if keys:
        return keys[0]
    end = min(peek.end, peek.start + CONVERSATION_BYTES)
    return xxhash.xxh64_intdigest(peek.buffer[peek.start : end])


def _in_span(spans: Spans, handler: Handler) -> Handler:
    """``handler`` inside the request's span; the replica gets that span's ``traceparent``."""

    async def traced(request: web.Request) -> web.StreamResponse:
        identity = request[IDENTITY]
        with spans.request(request.headers, request.method, request.path) as (span, parent):
            span.set_attribute("rollout.request_id", identity.request_id)
            lines = f"{REQUEST_ID}: {identity.request_id}\r\n".encode("ascii") + parent
            request[IDENTITY] = Identity(identity.request_id, lines)
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status)
            return response

    return traced


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _unsafe_request(request: web.Request) -> web.Response | None:
    """A 400 for a request the proxy cannot pass on as it came: a non-ASCII request target or
    Content-Type (they are forwarded verbatim), or a routing key that is not printable text."""
    if not _printable_ascii(request.rel_url.raw_path_qs):
        return error_response(400, "the request target must be printable ASCII (percent-encode)")
    content_type = request.headers.get("Content-Type", "")
    if not _printable_ascii(content_type):
        return error_response(400, "the Content-Type header must be printable ASCII")
    for name in ROUTING_KEY_HEADERS:
        value = request.headers.get(name)
        if value is not None and not value.isprintable():
            return error_response(400, f"the {name} header must be printable text")
    return None


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
    client: ClientSettings
    policy: Policy
    redactor: Redactor
    guard: Guard
    bodies: BodyBudget
    reuse: ReuseEstimator
    ids: Identities
    costs: CostModel
    access_log: bool = False
    spans: Spans | None = None
    sampler: Sampler | None = None

    def guarded(self, route: str, handler: Handler, *, open_route: bool = False) -> Handler:
        """Wrap ``handler`` with the request's identity, the inbound key check, request metrics,
        the access log and the connection's busy mark (no head timer while it is handled)."""
        api_key, metrics, guard, identities = self.api_key, self.metrics, self.guard, self.ids
        access = access_log if self.access_log else None
        if self.spans is not None:
            handler = _in_span(self.spans, handler)

        async def run(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            connection = guard.busy(request.transport)
            identity = identities.of(request)
            try:
                if identity is None:
                    metrics.record_rejection("bad_request")
                    response: web.StreamResponse = responses.bad_request_id()
                elif not open_route and not api_key.allows(request):
                    metrics.record_rejection("unauthorized")
                    response = api_key.refusal()
                else:
                    request[IDENTITY] = identity
                    response = await handler(request)
            finally:
                if connection is not None:
                    connection.finished()
            if identity is not None and not response.prepared:
                response.headers[REQUEST_ID] = identity.request_id
            seconds = time.perf_counter() - started
            metrics.record_request(route, response.status, seconds)
            if access is not None:
                access.info(
                    "%s %s %s %d %s %.1f ms",
                    identity.request_id if identity is not None else "-",
                    request.method,
                    request.path,
                    response.status,
                    response.headers.get(REPLICA_HEADER, "-"),
                    1000 * seconds,
                )
            return response

        return run

    async def _read(self, request: web.Request) -> bytes | web.Response:
        """The request body, within the body limit, the body timeout and the memory budget.

        The body's bytes stay reserved in ``bodies`` until ``_with_body`` releases them."""
        limit, length = self.client.max_body_bytes, request.content_length
        if length is not None and length > limit:
            self.metrics.record_rejection("too_large")
            return responses.too_large(limit)
        reserved = length if length is not None else limit
        if not self.bodies.reserve(reserved):
            self.metrics.record_rejection("body_budget")
            return responses.body_budget_full(self.bodies.limit)
        try:
            if request.content.is_eof():  # all of it arrived with the head: nothing to time
                body = await request.read()
            else:
                async with asyncio.timeout(self.client.body_timeout_s):
                    body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.bodies.release(reserved)
            self.metrics.record_rejection("too_large")
            return responses.too_large(limit)
        except TimeoutError:
            self.bodies.release(reserved)
            self.metrics.record_rejection("body_timeout")
            return responses.body_timeout(self.client.body_timeout_s)
        except BaseException:
            self.bodies.release(reserved)
            raise
        self.bodies.release(reserved - len(body))
        return body

    def generation(self, route: str, prompt_key: bytes) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await self._checked_body(request)
            if isinstance(body, web.Response):
                return body
            try:
                return await self._generate(request, route, prompt_key, body)
            finally:
                self.bodies.release(len(body))

        return handle

    async def _checked_body(self, request: web.Request) -> bytes | web.Response:
        """The body of a request that goes to a replica as it came (so it must be passable)."""
        bad = _unsafe_request(request)
        if bad is not None:
            self.metrics.record_rejection("bad_request")
            return bad
        return await self._read(request)

    async def _with_body(
        self,
        request: web.Request,
        use: Callable[[bytes], Awaitable[web.StreamResponse]],
        *,
        forwarded: bool = True,
    ) -> web.StreamResponse:
        """Read the body (``_read``'s bounds), hand it to ``use``, release it after.
        ``forwarded``: the request goes to a replica as it came, so it must be passable."""
        body = await (self._checked_body(request) if forwarded else self._read(request))
        if isinstance(body, web.Response):
            return body
        try:
            return await use(body)
        finally:
            self.bodies.release(len(body))

    async def _generate(
        self, request: web.Request, route: str, prompt_key: bytes, body: bytes
    ) -> web.StreamResponse:
        try:
            peek = peek_generation(body, prompt_key, self.client.max_prompt_elements)
        except BadBody as exc:
            self.metrics.record_rejection("bad_request")
            return error_response(400, str(exc), param=exc.param)
        model = peek.model
        if model is not None and self.fleet.unknown(model):
            self.metrics.record_rejection("unknown_model")
            return responses.model_not_found(model)
        headers = request.headers
        key = headers.get(ROUTING_KEY_HEADERS[0]) or headers.get(ROUTING_KEY_HEADERS[1])
        keys, hint = ((), None) if key is not None else self.policy.route_keys(peek, model)
        if peek.kind in SINGLE_PROMPTS and self.reuse.sampled(_conversation(peek, keys)):
            self._observe_reuse(peek, model)
        budget = decode_budget(peek)
        cost = self.costs.estimate(estimate_prompt_tokens(peek), budget)
        facts = RouteRequest(model, key, keys, cost, budget, hint)
        return await self._forward(request, route, body, facts)

    def _observe_reuse(self, peek: Peek, model: str | None) -> None:
        """Available prefix reuse of a sampled prompt (see ``routing.reuse``), in tokens."""
        seed = xxhash.xxh64_intdigest((model or "").encode())
        size, available = self.reuse.observe(peek.buffer, peek.start, peek.end, seed)
        if size:
            tokens = prompt_tokens(peek)
            self.metrics.record_reuse(tokens, tokens * available // size)

    async def _forward(
        self, request: web.Request, route: str, body: bytes, facts: RouteRequest
    ) -> web.StreamResponse:
        try:
            return await self.forwarder.forward(request, route, body, facts, request[IDENTITY])
        except Rejected as exc:
            self.metrics.record_rejection(exc.reason)
            return responses.rejected(str(exc), exc.retry_after_s)
        except NoAnswer as exc:
            return responses.no_answer(self.redactor.text(str(exc)))
        except UpstreamTimeout as exc:
            return responses.upstream_timeout(str(exc))
        except LocalResourceError as exc:
            self.metrics.record_rejection("local_resources")
            log.warning("%s (raise the open-files limit: ulimit -n)", exc)
            return responses.local_resources(f"{exc}; retry shortly")

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        return await self._with_body(
            request, lambda body: self._forward(request, "passthrough", body, RouteRequest(None))
        )

    async def load(self, request: web.Request) -> web.StreamResponse:
        return await self._with_body(request, self._load, forwarded=False)

    async def _load(self, body: bytes) -> web.StreamResponse:
        try:
            result = await self.adapters.load(body)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        except NoReplica:
            return responses.no_replica()
        return self.redactor.load_answer(result)

    async def unload(self, request: web.Request) -> web.StreamResponse:
        return await self._with_body(request, self._unload, forwarded=False)

    async def _unload(self, body: bytes) -> web.StreamResponse:
        try:
            result = await self.adapters.unload(body)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        return responses.unload_answer(result)

    async def control(self, request: web.Request) -> web.StreamResponse:
        bad = _unsafe_request(request)
        if bad is not None:
            self.metrics.record_rejection("bad_request")
            return bad
        query = request.rel_url.raw_query_string
        try:
            outcomes = await self.fanout.control(request.path, query)
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
        listing = views.models(self.pool, self.adapters.roots())
        if listing is None:
            return responses.not_reported("listed its models")
        return json_response(200, listing)

    async def metrics_page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def status(self, request: web.Request) -> web.StreamResponse:
        uptime = time.monotonic() - STARTED
        paused = self.fleet.paused_seconds()
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
                "pid": os.getpid(),
                "uptime_s": round(uptime, 3),
                "quality": self.metrics.quality(),
                "syncs": {
                    "count": self.fleet.syncs,
                    "last_s": self.fleet.last_paused_s,
                    "paused_s": round(paused, 3),
                    "paused_share": paused / uptime if uptime > 0 else None,
                },
                "advice": self.sampler.advice().as_dict() if self.sampler is not None else None,
                "inflight_by_version": self.forwarder.inflight_by_version(
                    self.adapters.registry.versions
                ),
                "restarts": restarts_so_far(),
                "client_connections": self.guard.connections,
                "body_bytes_held": self.bodies.held,
            },
        )
