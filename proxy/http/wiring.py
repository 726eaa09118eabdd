"""The HTTP edge assembled: the connection guard, aiohttp's client-error log, the layers every
request passes through (``edge``, ``errors``), the handlers, the admin API, and the route table
over them.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from proxy.adapters.wiring import Adapters
from proxy.clock import Clock
from proxy.config import Settings
from proxy.dataplane.wiring import DataPlane
from proxy.fleet.hosts import HostAllowlist
from proxy.fleet.wiring import Fleet
from proxy.http.admin import Admin
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BodyBudget, BodyReader
from proxy.http.client_log import ClientErrorLog
from proxy.http.edge import Edge
from proxy.http.errors import ErrorAnswers
from proxy.http.handlers import FleetControl, Handlers
from proxy.http.identity import Identities
from proxy.http.receiver import ReceiverRoutes
from proxy.http.refusals import TooManyConnections
from proxy.http.responses import Redactor
from proxy.http.routes import add_routes
from proxy.http.run_admin import RunAdmin
from proxy.http.scaler_admin import ScalerAdmin
from proxy.http.server import Guard
from proxy.http.status import Status
from proxy.http.tracing import Spans
from proxy.insight.sampler import Sampler
from proxy.logs import secret_values
from proxy.metrics.page import MetricsPage
from proxy.metrics.recorder import Metrics
from proxy.runs.table import Runs


@dataclass(frozen=True, slots=True)
class HttpRoom:
    handlers: Handlers
    admin: Admin
    run_admin: RunAdmin
    scaler_admin: ScalerAdmin
    receiver: ReceiverRoutes
    guard: Guard
    client_log: ClientErrorLog
    edge: Edge

    def routes(self, app: web.Application) -> None:
        admin = (self.admin, self.run_admin, self.scaler_admin)
        add_routes(app, self.handlers, admin, self.receiver, self.edge)


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
) -> HttpRoom:
    fleet, adapters, dataplane = parts
    client = settings.client
    redactor = Redactor(secret_values(settings))
    errors = ErrorAnswers(metrics, redactor)
    guard = Guard(client, errors.refusal(TooManyConnections()), clock)
    bodies = BodyReader(client, BodyBudget(client.max_body_bytes_in_flight))
    handlers = Handlers(
        pool=fleet.pool,
        forwarder=dataplane.forwarder,
        fanout=dataplane.fanout,
        adapters=adapters.service,
        facts=dataplane.facts,
        status_of=status,
        redactor=redactor,
        bodies=bodies,
        queue_timeout_s=settings.limits.queue_timeout_s,
        guard=guard,
        sampler=sampler,
        page=page,
        captured=adapters.service.check.captured,
        fleet_control=FleetControl(dataplane.fanout, redactor),
    )
    hosts = HostAllowlist.of(settings)
    admin = Admin(fleet.pool, KeyCheck(settings.admin_key, "admin"), hosts, bodies)
    run_admin = RunAdmin(runs, status, sampler, adapters.service, bodies)
    scaler_admin = ScalerAdmin(status.scaler, metrics, bodies, clock)
    edge = Edge(
        metrics,
        guard,
        Identities(),
        errors,
        KeyCheck(settings.api_key, "API"),
        runs,
        spans=spans,
        access=settings.access_log,
    )
    return HttpRoom(
        handlers,
        admin,
        run_admin,
        scaler_admin,
        ReceiverRoutes(adapters.receiver),
        guard,
        ClientErrorLog(metrics.record_bad_input, clock.monotonic),
        edge,
    )
