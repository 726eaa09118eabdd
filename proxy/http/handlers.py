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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.calls import BadAdapterRequest
from proxy.adapters.service import AdapterService
from proxy.config import ClientSettings
from proxy.dataplane.fanout import PAUSE_MODES, FanOut
from proxy.dataplane.forward import (
    REPLICA_HEADER,
    Forwarder,
    Identity,
    NoAnswer,
    UpstreamTimeout,
)
from proxy.dataplane.limiter import Rejected
from proxy.fleet import views
from proxy.fleet.pool import NoReplica, ReplicaPool
from proxy.http import responses
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BodyBudget
from proxy.http.identity import IDENTITY, REQUEST_ID, Identities
from proxy.http.responses import Redactor, error_response, json_response
from proxy.http.server import Guard
from proxy.http.status import Status
from proxy.http.tracing import Spans
from proxy.insight.sampler import Sampler
from proxy.metrics.recorder import Metrics
from proxy.routing.facts import Facts, UnknownModel
from proxy.routing.peek import BadBody
from proxy.routing.policy import RouteRequest
from proxy.upstream.errors import LocalResourceError

ROUTING_KEY_HEADERS = ("X-Routing-Key", "X-Session-ID")

log = logging.getLogger("proxy.http")
access_log = logging.getLogger("proxy.access")


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
    """The routes' handlers. ``facts`` builds a generation request's routing facts; the
    forwarder, the fan-out and the adapter service do the work; ``status`` reads the page."""

    pool: ReplicaPool
    forwarder: Forwarder
    fanout: FanOut
    adapters: AdapterService
    metrics: Metrics
    facts: Facts
    status_of: Status
    api_key: KeyCheck
    client: ClientSettings
    redactor: Redactor
    guard: Guard
    bodies: BodyBudget
    ids: Identities
    access_log: bool = False
    spans: Spans | None = None
    sampler: Sampler | None = None
    runs_page: Callable[[], dict[str, Any]] | None = None  # several runs: ``http.runs``

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

    async def _with_body(
        self,
        request: web.Request,
        use: Callable[..., Awaitable[web.StreamResponse]],
        *args: Any,
        forwarded: bool = True,
    ) -> web.StreamResponse:
        """Read the body (``_read``'s bounds), answer ``use(request, body, *args)``, release
        the body after. ``forwarded``: the request goes to a replica as it came, so it must be
        passable (``_unsafe_request``)."""
        if forwarded:
            bad = _unsafe_request(request)
            if bad is not None:
                self.metrics.record_rejection("bad_request")
                return bad
        body = await self._read(request)
        if isinstance(body, web.Response):
            return body
        try:
            return await use(request, body, *args)
        finally:
            self.bodies.release(len(body))

    def generation(self, route: str, prompt_key: bytes) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._with_body(request, self._generate, route, prompt_key)

        return handle

    async def _generate(
        self, request: web.Request, body: bytes, route: str, prompt_key: bytes
    ) -> web.StreamResponse:
        headers = request.headers
        key = headers.get(ROUTING_KEY_HEADERS[0]) or headers.get(ROUTING_KEY_HEADERS[1])
        try:
            facts = self.facts.build(body, prompt_key, key)
        except BadBody as exc:
            self.metrics.record_rejection("bad_request")
            return error_response(400, str(exc), param=exc.param)
        except UnknownModel as exc:
            self.metrics.record_rejection("unknown_model")
            return responses.model_not_found(exc.model)
        return await self._forward(request, body, route, facts)

    async def _forward(
        self,
        request: web.Request,
        body: bytes,
        route: str,
        facts: RouteRequest,
        target: str | None = None,
        run: str | None = None,
    ) -> web.StreamResponse:
        try:
            identity = request[IDENTITY]
            return await self.forwarder.forward(request, route, body, facts, identity, target, run)
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
        return await self._with_body(request, self._forward, "passthrough", RouteRequest(None))

    async def load(self, request: web.Request) -> web.StreamResponse:
        return await self._with_body(request, self._load, forwarded=False)

    async def _load(self, request: web.Request, body: bytes) -> web.StreamResponse:
        try:
            result = await self.adapters.load(body)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        except NoReplica:
            return responses.no_replica()
        return self.redactor.load_answer(result)

    async def unload(self, request: web.Request) -> web.StreamResponse:
        return await self._with_body(request, self._unload, forwarded=False)

    async def _unload(self, request: web.Request, body: bytes) -> web.StreamResponse:
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
        if self.fanout.answers(request.path):
            mode = request.rel_url.query.get("mode", "abort")
            if request.path == "/pause" and mode not in PAUSE_MODES:
                return error_response(400, f"mode must be one of {PAUSE_MODES}", param="mode")
            self.fanout.answer(request.path, query)
            return responses.answered(request.path)
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
        advice = self.sampler.advice() if self.sampler is not None else None
        page = self.status_of.page(
            advice, client_connections=self.guard.connections, body_bytes_held=self.bodies.held
        )
        runs = self.runs_page() if self.runs_page is not None else None
        if runs:  # declared runs only: a single-run proxy's page is as it was
            page["runs"] = runs
        return json_response(200, page)
