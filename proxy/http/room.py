"""The HTTP edge assembled: the connection guard, aiohttp's client-error log, the middlewares
(``edge``, ``errors``), the handlers, the admin API, and the route table over them.

The middlewares, outermost first: identity and metrics; the request's span (``--otel-spans``
only); domain errors into answers; the API key (``--api-key`` only: without one nothing is
checked, so nothing is added to the request path); the scope.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from proxy.adapters.room import Adapters
from proxy.clock import Clock
from proxy.config import Settings
from proxy.dataplane.room import DataPlane
from proxy.fleet.hosts import HostAllowlist
from proxy.fleet.room import Fleet
from proxy.http import edge
from proxy.http.admin import Admin
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BodyBudget
from proxy.http.errors import error_middleware
from proxy.http.handlers import Handlers
from proxy.http.identity import Identities
from proxy.http.receiver import ReceiverRoutes
from proxy.http.responses import Redactor
from proxy.http.routes import add_routes
from proxy.http.run_admin import RunAdmin
from proxy.http.server import ClientErrorLog, Guard
from proxy.http.status import Status
from proxy.http.tracing import Spans
from proxy.insight.sampler import Sampler
from proxy.logs import secret_values
from proxy.metrics.page import MetricsPage
from proxy.metrics.recorder import Metrics
from proxy.runs.table import Runs


@dataclass(frozen=True, slots=True)
class Edge:
    handlers: Handlers
    admin: Admin
    run_admin: RunAdmin
    receiver: ReceiverRoutes
    guard: Guard
    client_log: ClientErrorLog
    infos: edge.RouteInfos
    middlewares: tuple[Middleware, ...]

    def routes(self, app: web.Application) -> None:
        add_routes(app, self.handlers, self.admin, self.run_admin, self.receiver, self.infos)


def build_edge(
    settings: Settings,
    clock: Clock,
    parts: tuple[Fleet, Adapters, DataPlane],
    metrics: Metrics,
    status: Status,
    sampler: Sampler,
    spans: Spans | None,
    runs: Runs,
    page: MetricsPage,
) -> Edge:
    fleet, adapters, dataplane = parts
    client = settings.client
    guard = Guard(client, metrics.record_rejection)
    redactor = Redactor(secret_values(settings))
    bodies = BodyBudget(client.max_body_bytes_in_flight)
    handlers = Handlers(
        pool=fleet.pool,
        forwarder=dataplane.forwarder,
        fanout=dataplane.fanout,
        adapters=adapters.service,
        metrics=metrics,
        facts=dataplane.facts,
        status_of=status,
        client=client,
        redactor=redactor,
        bodies=bodies,
        runs=runs,
        queue_timeout_s=settings.limits.queue_timeout_s,
        guard=guard,
        sampler=sampler,
        page=page,
        captured=adapters.service.policy.captured,
    )
    hosts = HostAllowlist.of(settings)
    admin = Admin(fleet.pool, KeyCheck(settings.admin_key, "admin"), hosts, client.body_timeout_s)
    run_admin = RunAdmin(runs, status, sampler, adapters.service, client.body_timeout_s)
    infos = edge.RouteInfos()
    middlewares = [edge.identity(infos, metrics, guard, Identities(), settings.access_log)]
    if spans is not None:
        middlewares.append(edge.traced(spans))
    middlewares.append(error_middleware(metrics, redactor))
    api_key = KeyCheck(settings.api_key, "API")
    if api_key.enabled:
        middlewares.append(edge.auth(infos, api_key, metrics))
    middlewares.append(edge.scope(runs))
    return Edge(
        handlers,
        admin,
        run_admin,
        ReceiverRoutes(adapters.receiver),
        guard,
        ClientErrorLog(metrics.record_bad_input, clock.monotonic),
        infos,
        tuple(middlewares),
    )
