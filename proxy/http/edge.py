"""The edge: what every request passes through before its handler, in one place.

Outermost first: the request's identity (``BadRequestId`` when it cannot be passed on), its
metrics and access-log line; its span when tracing is on; its domain errors turned into answers
(``proxy.http.errors``: the one place they are caught); the inbound key (``auth``, only with
``--api-key``); its run (``proxy.runs.run``): a declared one under ``/runs/<run>/``, else the
default run (the bare path). The handlers behind it are one set for every run (``handlers``).

The layers are composed once per route, when the route table is built, from what the table
knows of the route (its metrics label, whether it is open, whether it is under ``/runs/{run}``),
not as aiohttp middlewares: aiohttp rebuilds a middleware chain on every request (through a cache
keyed by the handler) and each middleware is one more coroutine, and the default path's three
cost ~4 % of the proxy's CPU per request (``benchmarks overhead``). The behaviour is a middleware
chain's, in that order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.dataplane.exchange import Identity
from proxy.dataplane.headers import REPLICA_HEADER
from proxy.errors import DomainError
from proxy.http.auth import KeyCheck
from proxy.http.errors import ErrorAnswers
from proxy.http.identity import IDENTITY, REQUEST_ID, Identities
from proxy.http.refusals import BadRequestId
from proxy.http.server import Guard
from proxy.http.tracing import Spans
from proxy.metrics.recorder import Metrics
from proxy.runs.run import DEFAULT, Run
from proxy.runs.table import Runs

access_log = logging.getLogger("proxy.access")
RUN = web.RequestKey("run", Run)  # the request's run: the default run, or a declared one


@dataclass(frozen=True, slots=True)
class RouteInfo:
    label: str  # the ``route`` label of the request metrics
    open: bool = False  # served without the API key (/health; the admin API checks its own)
    runs: bool = False  # under ``/runs/{run}``: the request's run is that one


class Edge:
    """The layers every route's handler is served through (``wrap``)."""

    def __init__(
        self,
        metrics: Metrics,
        guard: Guard,
        ids: Identities,
        errors: ErrorAnswers,
        key: KeyCheck,
        runs: Runs,
        *,
        spans: Spans | None = None,
        access: bool = False,
    ) -> None:
        self._metrics = metrics
        self._guard = guard
        self._ids = ids
        self._errors = errors
        self._key = key if key.enabled else None  # no key: nothing checked, nothing added
        self._runs = runs
        self._spans = spans
        self._access = access_log if access else None

    def wrap(self, handler: Handler, info: RouteInfo) -> Handler:
        """``handler`` inside the edge's layers, for the route ``info`` describes."""
        inner = self._answered(handler, info)
        if self._spans is not None:
            inner = self._traced(inner)
        return self._identified(inner, info.label)

    def _identified(self, handler: Handler, label: str) -> Handler:
        """The request's id (refused 400 when it cannot be passed on), its connection marked
        busy (no head timer while it is handled), its metrics and, with ``--access-log``, its
        line."""
        metrics, guard, ids, log = self._metrics, self._guard, self._ids, self._access
        errors = self._errors

        async def identified(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            connection = guard.busy(request.transport)
            known = ids.of(request)
            try:
                if known is None:  # answered here: the layers inside need the identity
                    response: web.StreamResponse = errors.answer(BadRequestId())
                else:
                    request[IDENTITY] = known
                    response = await handler(request)
            finally:
                if connection is not None:
                    connection.finished()
            if known is not None and not response.prepared:
                response.headers[REQUEST_ID] = known.request_id
            seconds = time.perf_counter() - started
            metrics.record_request(label, response.status, seconds)
            if log is not None:
                log.info(
                    "%s %s %s %d %s %.1f ms",
                    known.request_id if known is not None else "-", request.method, request.path,
                    response.status, response.headers.get(REPLICA_HEADER, "-"), 1000 * seconds,
                )  # fmt: skip
            return response

        return identified

    def _traced(self, handler: Handler) -> Handler:
        """The request inside its span; the replica gets that span's ``traceparent``."""
        spans = self._spans
        assert spans is not None

        async def in_span(request: web.Request) -> web.StreamResponse:
            known = request[IDENTITY]
            with spans.request(request.headers, request.method, request.path) as (span, parent):
                span.set_attribute("rollout.request_id", known.request_id)
                lines = f"{REQUEST_ID}: {known.request_id}\r\n".encode("ascii") + parent
                request[IDENTITY] = Identity(known.request_id, lines)
                response = await handler(request)
                span.set_attribute("http.response.status_code", response.status)
                return response

        return in_span

    def _answered(self, handler: Handler, info: RouteInfo) -> Handler:
        """Domain errors answered (under a run, in its names); the key checked (a closed
        route, a key configured: ``Unauthorized``); the request's run: the one declared under
        ``/runs/<run>/`` (``UnknownRun`` if no one declared it; each answer counted for the
        run), else the default run."""
        errors, runs = self._errors, self._runs
        key = None if info.open else self._key

        async def answered(request: web.Request) -> web.StreamResponse:
            run: Run = DEFAULT
            try:
                if key is not None:
                    key.check(request)
                if info.runs:
                    run = runs.get(request.match_info["run"])
                request[RUN] = run
                try:
                    return await handler(request)
                finally:
                    run.answered()
            except DomainError as exc:  # the one place a domain error becomes its answer
                return errors.answer(exc, run)

        return answered
