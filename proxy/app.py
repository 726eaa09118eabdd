"""The composition root: settings -> rooms -> one ``Proxy`` -> an aiohttp Application.

``build_app`` must be called with an event loop running (the upstream session binds to it).
The rooms are made in dependency order, each by its own factory, with no forward reference:
the fleet's members (pool, upstream client, the replicas' own views) and the metrics; the
adapters (``adapters.room``); the rest of the fleet (``fleet.room``: sync, health, outliers,
load scraper, discovery); the data plane (``dataplane.room``); what the proxy reads of itself
and the advisor's sampler (``http.status``, ``insight``); the HTTP edge (``http.room``). One
clock tells time for all of them. The whole ``Proxy`` lives on the app under one key, ``PROXY``.

Lifecycle (``Proxy.lifespan``, started in this order, stopped in reverse): the upstream client
(closed last, so also when a later part fails at start: no session is left unclosed), the adapter
store (the proxy's own receiver's, emptied at start), the adapter mirror (``--adapters-local``:
it lands what is left at exit), the
adapter service and the source's watcher, the health loop (first probe round at once, so a
fleet that is up is routable within milliseconds), the load scraper (each replica's /metrics),
replica discovery, the advisor's sampler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from proxy.adapters.wiring import Adapters, build_adapters
from proxy.clock import Clock, RealClock
from proxy.config import Settings
from proxy.dataplane.limiter import Limiter
from proxy.dataplane.wiring import DataPlane, build_dataplane
from proxy.fleet.discovery import Resolver, resolve
from proxy.fleet.outage import Outage
from proxy.fleet.pool import NO_REPLICA_GRACE_S
from proxy.fleet.shares import RunShares
from proxy.fleet.wiring import Fleet, build_fleet, members
from proxy.http.listen import CannotListen
from proxy.http.server import serving
from proxy.http.status import Status
from proxy.http.tracing import Spans
from proxy.http.wiring import HttpRoom, build_edge
from proxy.insight.advisor import VERDICTS
from proxy.insight.sampler import Sampler
from proxy.logs import BackgroundErrors
from proxy.metrics.collector import StateCollector
from proxy.metrics.page import MetricsPage
from proxy.metrics.recorder import Metrics
from proxy.metrics.runs import RunCollector
from proxy.runs.table import Runs, parse_runs
from proxy.supervise import restarts_so_far

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

log = logging.getLogger("proxy")


@dataclass(frozen=True, slots=True)
class Proxy:
    settings: Settings
    metrics: Metrics
    fleet: Fleet
    adapters: Adapters
    dataplane: DataPlane
    status: Status
    sampler: Sampler
    edge: HttpRoom
    runs: Runs
    page: MetricsPage  # what /metrics renders

    async def lifespan(self, app: web.Application) -> AsyncIterator[None]:
        """Start the background parts in the documented order; stop them in reverse."""
        fleet, adapters = self.fleet, self.adapters
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(fleet.client.close)
            await stack.enter_async_context(adapters.open_store())
            await stack.enter_async_context(adapters.mirroring())  # drains after the rest stop
            stack.push_async_callback(adapters.service.close)  # after the watcher stops
            if fleet.discovery is not None:
                log.info("discovering replicas: %s", fleet.discovery.lookup)
            loops: tuple[tuple[Loop | None, str], ...] = (
                (adapters.service.state, "adapter-state"),
                (adapters.service, "adapter-service"),
                (adapters.watcher, "adapter-watcher"),
                (fleet.health, "health-monitor"),
                (fleet.load, "load-scraper"),
                (fleet.discovery, "replica-discovery"),
                (self.sampler, "advisor-sampler"),
            )
            for loop, name in loops:
                if loop is not None:
                    await stack.enter_async_context(_running(loop.run(), name))
            yield


PROXY = web.AppKey("proxy", Proxy)


def build_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    tracer: Tracer | None = None,
    resolver: Resolver = resolve,
    no_replica_grace_s: float = NO_REPLICA_GRACE_S,
) -> web.Application:
    """The proxy as an aiohttp app. ``tracer``: OpenTelemetry spans (``--otel-spans``);
    ``resolver``: how a ``dns:`` discovery name is resolved (tests stand in for DNS);
    ``no_replica_grace_s``: how long the fleet may have no routable replica before a request
    is refused at once instead of queued (``fleet.outage``)."""
    spans = Spans(tracer) if tracer is not None else None
    proxy = assemble(settings, clock or RealClock(), spans, resolver, no_replica_grace_s)
    app = web.Application(client_max_size=settings.client.max_body_bytes)
    app[PROXY] = proxy
    proxy.edge.routes(app)
    app.cleanup_ctx.append(proxy.lifespan)
    return app


def assemble(
    settings: Settings,
    clock: Clock,
    spans: Spans | None,
    resolver: Resolver,
    no_replica_grace_s: float = NO_REPLICA_GRACE_S,
) -> Proxy:
    """Every room, in dependency order (see the module docstring)."""
    runs = Runs(parse_runs(settings.runs or ""))
    outage = Outage(clock)
    limiter = Limiter(settings.limits, clock, outage)
    shares = RunShares(runs)
    followers = (outage.follow, limiter.follow, shares.follow)
    fleet_members = members(settings, clock, followers, no_replica_grace_s)
    metrics = Metrics(fleet_members.pool)
    runs.follow(lambda table: metrics.runs_changed(table.names()))  # each run's series, bounded
    metrics.record_restarts(restarts_so_far())
    failed = BackgroundErrors(metrics.record_background_error)
    adapters = build_adapters(settings, fleet_members, clock, metrics, failed, runs)
    fleet = build_fleet(
        settings, fleet_members, adapters.service, clock, failed, metrics.record_load_scrape,
        resolver,
    )  # fmt: skip
    dataplane = build_dataplane(settings, fleet, adapters.service, limiter, metrics, spans)
    status = Status(
        fleet.pool,
        fleet.sync,
        dataplane.limiter,
        dataplane.forwarder,
        adapters.service,
        metrics,
        dataplane.policy,
        clock,
        settings.limits.queue_size,
        runs,
        shares,
        adapters.watcher,
    )
    sampler = Sampler(clock, status.sample, settings.advice_window, failed)
    page = MetricsPage(
        metrics.registry,
        StateCollector(fleet.pool, status.sources(sampler.advice)),
        RunCollector(lambda: status.run_views(sampler.run_advice()), VERDICTS),
    )
    parts = (fleet, adapters, dataplane)
    edge = build_edge(settings, clock, parts, metrics, status, sampler, spans, runs, page)
    return Proxy(settings, metrics, fleet, adapters, dataplane, status, sampler, edge, runs, page)


class Loop(Protocol):
    """A background part: ``run`` loops until cancelled, surviving its own exceptions."""

    def run(self) -> Coroutine[Any, Any, None]: ...


@contextlib.asynccontextmanager
async def _running(loop: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """Run a background loop for the app's lifetime; cancel and await it at cleanup."""
    task = asyncio.create_task(loop, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def serve(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    shutdown_timeout: float = 2.0,
    sock: socket.socket | None = None,
) -> AsyncIterator[str]:
    """Serve an app ``build_app`` made, with its connection guard and client-error log (on
    ``sock`` when a supervisor handed one down).

    A port that cannot be opened raises ``CannotListen`` before the app starts; the upstream
    client, made with the app, is closed then too (its session would be reported unclosed)."""
    proxy = app[PROXY]
    try:
        async with serving(
            app,
            proxy.edge.guard,
            proxy.edge.client_log,
            proxy.settings.client,
            host=host,
            port=port,
            shutdown_timeout=shutdown_timeout,
            sock=sock,
        ) as url:
            yield url
    except CannotListen:  # raised before the app started: its lifespan closes nothing
        await proxy.fleet.client.close()
        raise
