"""The edge's middlewares, outermost first: a request's identity, its metrics and access-log line
(``identity``); its span when tracing is on (``traced``); its domain errors turned into answers
(``proxy.http.errors``); the inbound key (``auth``); its scope, the bare path or one run
(``scope``). The handlers behind them are one set for every scope (``handlers``).

A route's metrics label and whether it is open (served without the API key) are noted when the
route table is built (``RouteInfo``, read here by the route aiohttp matched).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aiohttp import web
from aiohttp.abc import AbstractMatchInfo
from aiohttp.typedefs import Handler, Middleware

from proxy.dataplane.exchange import Identity
from proxy.dataplane.forward import REPLICA_HEADER
from proxy.http import responses
from proxy.http.auth import KeyCheck
from proxy.http.identity import IDENTITY, REQUEST_ID, Identities
from proxy.http.server import Guard
from proxy.http.tracing import Spans
from proxy.metrics.recorder import Metrics
from proxy.runs.scope import BARE, Scope
from proxy.runs.table import Runs

access_log = logging.getLogger("proxy.access")
SCOPE = web.RequestKey("scope", Scope)


@dataclass(frozen=True, slots=True)
class RouteInfo:
    label: str  # the ``route`` label of the request metrics
    open: bool = False  # served without the API key (/health; the admin API checks its own)


UNNOTED = RouteInfo("other")  # a route the table did not note: closed, never open by mistake


class RouteInfos:
    """Each route's ``RouteInfo``, noted by the route table as it registers them."""

    def __init__(self) -> None:
        self._infos: dict[object, RouteInfo] = {}

    def note(self, route: web.AbstractRoute, info: RouteInfo) -> None:
        self._infos[route] = info

    def of(self, match: AbstractMatchInfo) -> RouteInfo:
        return self._infos.get(match.route, UNNOTED)  # type: ignore[attr-defined]


def identity(
    infos: RouteInfos, metrics: Metrics, guard: Guard, ids: Identities, access: bool
) -> Middleware:
    """The request's id (refused 400 when it cannot be passed on), its connection marked busy
    (no head timer while it is handled), its metrics and, with ``--access-log``, its line."""
    log = access_log if access else None

    @web.middleware
    async def identified(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        connection = guard.busy(request.transport)
        known = ids.of(request)
        try:
            if known is None:
                metrics.record_rejection("bad_request")
                response: web.StreamResponse = responses.bad_request_id()
            else:
                request[IDENTITY] = known
                response = await handler(request)
        finally:
            if connection is not None:
                connection.finished()
        if known is not None and not response.prepared:
            response.headers[REQUEST_ID] = known.request_id
        seconds = time.perf_counter() - started
        metrics.record_request(infos.of(request.match_info).label, response.status, seconds)
        if log is not None:
            log.info(
                "%s %s %s %d %s %.1f ms",
                known.request_id if known is not None else "-", request.method, request.path,
                response.status, response.headers.get(REPLICA_HEADER, "-"), 1000 * seconds,
            )  # fmt: skip
        return response

    return identified


def traced(spans: Spans) -> Middleware:
    """The request inside its span; the replica gets that span's ``traceparent``."""

    @web.middleware
    async def in_span(request: web.Request, handler: Handler) -> web.StreamResponse:
        known = request[IDENTITY]
        with spans.request(request.headers, request.method, request.path) as (span, parent):
            span.set_attribute("rollout.request_id", known.request_id)
            lines = f"{REQUEST_ID}: {known.request_id}\r\n".encode("ascii") + parent
            request[IDENTITY] = Identity(known.request_id, lines)
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status)
            return response

    return in_span


def auth(infos: RouteInfos, key: KeyCheck, metrics: Metrics) -> Middleware:
    """``--api-key`` on every route but the open ones (installed only when a key is set)."""

    @web.middleware
    async def checked(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not infos.of(request.match_info).open and not key.allows(request):
            metrics.record_rejection("unauthorized")
            return key.refusal()
        return await handler(request)

    return checked


def scope(runs: Runs) -> Middleware:
    """The request's scope: its run under ``/runs/<run>/`` (``UnknownRun`` if no one declared
    it; each answer counted for the run), else the bare path's."""

    @web.middleware
    async def scoped(request: web.Request, handler: Handler) -> web.StreamResponse:
        name = request.match_info.get("run")
        if name is None:
            request[SCOPE] = BARE
            return await handler(request)
        run = runs.get(name)
        request[SCOPE] = Scope(run)
        try:
            return await handler(request)
        finally:
            run.answered()

    return scoped
