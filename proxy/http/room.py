"""The HTTP edge assembled: the connection guard, aiohttp's client-error log, the handlers and
the admin API, and the route table (``add_routes``) over them."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from proxy.adapters.room import Adapters
from proxy.clock import Clock
from proxy.config import Settings
from proxy.dataplane.room import DataPlane
from proxy.fleet.hosts import HostAllowlist
from proxy.fleet.room import Fleet
from proxy.http.admin import Admin
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BodyBudget
from proxy.http.handlers import Handlers
from proxy.http.identity import Identities
from proxy.http.receiver import ReceiverRoutes
from proxy.http.responses import Redactor
from proxy.http.routes import add_routes
from proxy.http.runs import RunRoutes
from proxy.http.server import ClientErrorLog, Guard
from proxy.http.status import Status
from proxy.http.tracing import Spans
from proxy.insight.sampler import Sampler
from proxy.logs import secret_values
from proxy.metrics.recorder import Metrics
from proxy.runs.table import Runs


@dataclass(frozen=True, slots=True)
class Edge:
    handlers: Handlers
    admin: Admin
    receiver: ReceiverRoutes
    guard: Guard
    client_log: ClientErrorLog
    runs: RunRoutes

    def routes(self, app: web.Application) -> None:
        self.runs.add(app)  # before the table's catch-all
        add_routes(app, self.handlers, self.admin, self.receiver)


def build_edge(
    settings: Settings,
    clock: Clock,
    parts: tuple[Fleet, Adapters, DataPlane],
    metrics: Metrics,
    status: Status,
    sampler: Sampler,
    spans: Spans | None,
    runs: Runs,
) -> Edge:
    fleet, adapters, dataplane = parts
    client = settings.client
    guard = Guard(client, metrics.record_rejection)
    handlers = Handlers(
        pool=fleet.pool,
        forwarder=dataplane.forwarder,
        fanout=dataplane.fanout,
        adapters=adapters.service,
        metrics=metrics,
        facts=dataplane.facts,
        status_of=status,
        api_key=KeyCheck(settings.api_key, "API"),
        client=client,
        redactor=Redactor(secret_values(settings)),
        guard=guard,
        bodies=BodyBudget(client.max_body_bytes_in_flight),
        ids=Identities(),
        access_log=settings.access_log,
        spans=spans,
        sampler=sampler,
    )
    hosts = HostAllowlist.of(settings)
    admin = Admin(fleet.pool, KeyCheck(settings.admin_key, "admin"), hosts, client.body_timeout_s)
    receiver = ReceiverRoutes(adapters.receiver)
    queue_timeout_s = settings.limits.queue_timeout_s
    return Edge(
        handlers,
        admin,
        receiver,
        guard,
        ClientErrorLog(metrics.record_bad_input, clock.monotonic),
        RunRoutes(
            handlers, runs, adapters.service, queue_timeout_s, receiver, admin, dataplane.limiter
        ),
    )
