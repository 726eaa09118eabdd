"""Assembles the proxy: settings -> components -> routes -> an aiohttp Application.

``build_app`` must be called with an event loop running (the upstream session binds to it).
Every shared object lives on the app under a ``web.AppKey``; one clock tells time for all of
them. Lifecycle (``cleanup_ctx``, started in order, stopped in reverse): the adapter store (the
proxy's own receiver's, emptied at start), the upstream client,
the adapter watcher, the health loop (first probe round at once, so a fleet that is up is
routable within milliseconds), the load scraper (each replica's /metrics), replica discovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy.adapters.broadcast import Broadcaster, RetryPolicy
from proxy.adapters.push import Pushed, Pusher
from proxy.adapters.receive import Limits, Receiver
from proxy.adapters.registry import Registry
from proxy.adapters.service import AdapterService
from proxy.adapters.sources import BucketSource, DirectorySource, Source
from proxy.adapters.store import Entry, Store, claimable
from proxy.adapters.watcher import Watcher
from proxy.clock import Clock, Failed, RealClock
from proxy.config import AdapterSettings, Settings, split_bucket
from proxy.dataplane.fanout import FanOut
from proxy.dataplane.forward import Forwarder
from proxy.dataplane.limiter import Limiter
from proxy.fleet.breaker import Breaker
from proxy.fleet.discovery import Discovery
from proxy.fleet.health import HealthMonitor
from proxy.fleet.hosts import HostAllowlist
from proxy.fleet.load import LoadScraper
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.sync import FleetSync
from proxy.http.admin import Admin
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BodyBudget
from proxy.http.handlers import Handlers
from proxy.http.identity import Identities
from proxy.http.receiver import ReceiverRoutes
from proxy.http.responses import Redactor
from proxy.http.routes import add_routes
from proxy.http.server import ClientErrorLog, Guard, serving
from proxy.http.tracing import Spans
from proxy.insight.advisor import VERDICTS, Sample
from proxy.insight.sampler import Sampler
from proxy.logs import BackgroundErrors, secret_values
from proxy.metrics.collector import StateSources
from proxy.metrics.recorder import Metrics
from proxy.routing.cost import CostModel
from proxy.routing.factory import build_policy
from proxy.routing.reuse import ReuseEstimator
from proxy.supervise import restarts_so_far
from proxy.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

log = logging.getLogger("proxy")

POOL = web.AppKey("pool", ReplicaPool)
FLEET = web.AppKey("fleet", FleetSync)
LIMITER = web.AppKey("limiter", Limiter)
METRICS = web.AppKey("metrics", Metrics)
HEALTH = web.AppKey("health", HealthMonitor)
CLIENT = web.AppKey("client", UpstreamClient)
ADAPTERS = web.AppKey("adapters", AdapterService)
WATCHER = web.AppKey("watcher", Watcher)
DISCOVERY = web.AppKey("discovery", Discovery)
LOAD = web.AppKey("load", LoadScraper)
GUARD = web.AppKey("guard", Guard)
CLIENT_LOG = web.AppKey("client_log", ClientErrorLog)
SETTINGS = web.AppKey("settings", Settings)
RECEIVER = web.AppKey("receiver", Receiver)
SAMPLER = web.AppKey("sampler", Sampler)


def build_app(
    settings: Settings, *, clock: Clock | None = None, tracer: Tracer | None = None
) -> web.Application:
    """The proxy as an aiohttp app. ``tracer``: OpenTelemetry spans (``--otel-spans``)."""
    clock = clock or RealClock()
    spans = Spans(tracer) if tracer is not None else None
    upstream = settings.upstream
    pool = ReplicaPool(
        settings.replicas, clock=clock, on_eject=lambda cause: metrics.record_ejection(cause)
    )
    client = UpstreamClient(upstream)
    limiter = Limiter(settings.limits, pool, clock)
    pool.on_change = limiter.wake
    policy = build_policy(settings.policy)
    costs = CostModel()
    registry = Registry(window_override=settings.adapters.window)
    adapter_cfg = settings.adapters
    retry = RetryPolicy(
        adapter_cfg.load_deadline_s, adapter_cfg.retry_min_s, adapter_cfg.retry_max_s
    )
    store = Store(store_path(settings), adapter_cfg.store_max_bytes)
    broadcaster = Broadcaster(
        pool,
        client,
        registry,
        clock,
        retry,
        pusher=build_pusher(
            adapter_cfg, client, clock, settings.health.timeout_s, lambda t, e: failed(t, e)
        ),
        on_pushed=lambda replica, pushed: record_push(metrics, replica.id, pushed),
    )
    source = build_source(adapter_cfg, settings.hub_endpoint)
    metrics = Metrics(
        pool,
        StateSources(
            inflight=lambda: limiter.inflight,
            max_inflight=limiter.overall_cap,
            queued=lambda: limiter.queued,
            queue_limit=lambda: settings.limits.queue_size,
            routing=policy.stats,
            adapters=lambda: adapters.stats(),
            paused_seconds=lambda: fleet.paused_seconds(),
            inflight_by_version=lambda: forwarder.inflight_by_version(registry.versions),
            advice=lambda: sampler.advice().verdict,
            verdicts=VERDICTS,
        ),
    )
    metrics.record_restarts(restarts_so_far())
    failed = BackgroundErrors(metrics.record_background_error)
    adapters = AdapterService(
        broadcaster,
        metrics,
        lambda replica: fleet.refresh_info(replica),
        has_source=source is not None,
        failed=failed,
        store=store,
        fetch=build_fetch(source, store),
    )
    fleet = FleetSync(pool, client, adapters, clock)
    breaker = Breaker(pool, upstream.breaker_failures, upstream.breaker_cooldown_s)
    forwarder = Forwarder(
        pool,
        client.pool,
        limiter,
        policy,
        metrics,
        breaker,
        adapters,
        max_attempts=upstream.max_attempts,
        request_timeout_s=upstream.request_timeout_s,
        tracing=spans,
        costs=costs,
    )
    fanout = FanOut(pool, client, fleet, metrics)
    monitor = HealthMonitor(pool, client, settings.health, clock, fleet, failed)

    def sample() -> Sample:
        totals = metrics.totals()
        return Sample(
            at=clock.monotonic(),
            inflight=limiter.inflight,
            queued=limiter.queued,
            replica_inflight={r.id: r.inflight for r in pool.routable()},
            replica_waiting={
                r.id: r.reported.waiting for r in pool.routable() if r.reported is not None
            },
            replica_kv={
                r.id: r.reported.kv_usage for r in pool.routable() if r.reported is not None
            },
            pushing=adapters.broadcaster.pusher is not None,
            requests=totals["requests"],
            paused_s=fleet.paused_seconds(),
            prompt_tokens=totals["prompt"],
            cached_tokens=totals["cached"],
            offered_tokens=totals["offered"],
            available_tokens=totals["available"],
        )

    sampler = Sampler(clock, sample, settings.advice_window, failed)
    guard = Guard(settings.client, metrics.record_rejection)
    handlers = Handlers(
        pool=pool,
        fleet=fleet,
        limiter=limiter,
        forwarder=forwarder,
        fanout=fanout,
        adapters=adapters,
        metrics=metrics,
        api_key=KeyCheck(settings.api_key, "API"),
        client=settings.client,
        policy=policy,
        redactor=Redactor(secret_values(settings)),
        guard=guard,
        bodies=BodyBudget(settings.client.max_body_bytes_in_flight),
        reuse=ReuseEstimator(),
        ids=Identities(),
        access_log=settings.access_log,
        spans=spans,
        sampler=sampler,
        costs=costs,
    )

    app = web.Application(client_max_size=settings.client.max_body_bytes)
    app[SETTINGS] = settings
    app[GUARD] = guard
    app[CLIENT_LOG] = ClientErrorLog(metrics.record_bad_input, clock.monotonic)
    app[POOL] = pool
    app[FLEET] = fleet
    app[LIMITER] = limiter
    app[METRICS] = metrics
    app[HEALTH] = monitor
    if settings.load.interval_s > 0:
        app[LOAD] = LoadScraper(
            pool, client, settings.load, clock, failed, metrics.record_load_scrape
        )
    app[CLIENT] = client
    app[SAMPLER] = sampler
    app[ADAPTERS] = adapters
    if source is not None:
        app[WATCHER] = Watcher(source, clock, adapters.source_changed, failed)
    if settings.discover_source is not None:
        token = upstream.token
        app[DISCOVERY] = Discovery(
            settings.discover_source,
            pool,
            clock,
            failed=failed,
            interval_s=settings.discover_interval,
            endpoint=settings.hub_endpoint,
            token=token.get_secret_value() if token is not None else None,
            namespace=settings.discover_namespace,
        )
    receiver = Receiver(store, Limits(max_adapter_bytes=adapter_cfg.store_max_adapter_bytes))
    app[RECEIVER] = receiver
    admin = Admin(pool, KeyCheck(settings.admin_key, "admin"), HostAllowlist.of(settings),
                  settings.client.body_timeout_s)  # fmt: skip
    add_routes(app, handlers, admin, ReceiverRoutes(receiver))
    app.cleanup_ctx.append(_store_ctx)
    app.cleanup_ctx.append(_client_ctx)
    app.cleanup_ctx.append(_adapters_ctx)
    app.cleanup_ctx.append(_health_ctx)
    app.cleanup_ctx.append(_load_ctx)
    app.cleanup_ctx.append(_discovery_ctx)
    app.cleanup_ctx.append(_sampler_ctx)
    return app


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    """The proxy's receiver store: emptied at start; removed at exit unless it was named."""
    receiver = app[RECEIVER]
    await asyncio.to_thread(receiver.store.reset)
    yield
    receiver.close()
    if app[SETTINGS].adapters.store is None:
        await asyncio.to_thread(shutil.rmtree, receiver.store.root, True)


def store_path(settings: Settings) -> Path:
    """``--adapter-store``, else one per port (a supervised restart empties its own), else a
    fresh private one: for port 0, or when the per-port path is not ours (never followed)."""
    if settings.adapters.store is not None:
        return settings.adapters.store
    if settings.port:
        path = Path(tempfile.gettempdir()) / f"rollout-proxy-{settings.port}-adapters"
        why = claimable(path)
        if why is None:
            return path
        log.warning("adapter store: %s, so a fresh private directory is used", why)
    return Path(tempfile.mkdtemp(prefix="rollout-proxy-adapters-"))


def build_pusher(
    settings: AdapterSettings,
    client: UpstreamClient,
    clock: Clock,
    probe_timeout_s: float,
    failed: Failed,
) -> Pusher | None:
    if not settings.push:
        return None
    return Pusher(
        client,
        clock,
        buffer_bytes=settings.push_buffer_bytes,
        stall_s=settings.push_stall_s,
        rate=settings.push_rate,
        probe_timeout_s=probe_timeout_s,
        failed=failed,
    )


def build_fetch(source: Source | None, store: Store) -> Callable[[str, str], Entry | None] | None:
    """Downloads through the Hub for a bucket source (the proxy has no mount to read)."""
    if not isinstance(source, BucketSource):
        return None
    bucket = source

    def fetch(name: str, path: str) -> Entry | None:
        return bucket.fetch(name, store, path) if bucket.covers(path) == name else None

    return fetch


def record_push(metrics: Metrics, replica: str, pushed: Pushed) -> None:
    if pushed.path is not None:
        metrics.push.record_push(replica, pushed.bytes, pushed.seconds)
    elif pushed.cause is not None:
        metrics.push.record_fallback(pushed.cause)


async def _client_ctx(app: web.Application) -> AsyncIterator[None]:
    yield
    await app[CLIENT].close()


@contextlib.asynccontextmanager
async def _running(loop: Coroutine[Any, Any, None] | None, name: str) -> AsyncIterator[None]:
    """Run a background loop for the app's lifetime; cancel and await it at cleanup."""
    task = asyncio.create_task(loop, name=name) if loop is not None else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _adapters_ctx(app: web.Application) -> AsyncIterator[None]:
    """The watcher (if a source is configured); pending adapter work is cancelled at exit."""
    watcher = app.get(WATCHER)
    if watcher is not None:
        log.info("watching %s for adapter versions", watcher.source.describe())
    async with _running(watcher.run() if watcher else None, "adapter-watcher"):
        yield
    await app[ADAPTERS].close()


async def _discovery_ctx(app: web.Application) -> AsyncIterator[None]:
    discovery = app.get(DISCOVERY)
    if discovery is not None:
        log.info("discovering replicas: %s", discovery.lookup)
    async with _running(discovery.run() if discovery else None, "replica-discovery"):
        yield


async def _sampler_ctx(app: web.Application) -> AsyncIterator[None]:
    async with _running(app[SAMPLER].run(), "advisor-sampler"):
        yield


async def _health_ctx(app: web.Application) -> AsyncIterator[None]:
    async with _running(app[HEALTH].run(), "health-monitor"):
        yield


async def _load_ctx(app: web.Application) -> AsyncIterator[None]:
    """The load scraper (unless ``--load-interval 0``): each replica's /metrics figures."""
    scraper = app.get(LOAD)
    async with _running(scraper.run() if scraper else None, "load-scraper"):
        yield


def serve(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    shutdown_timeout: float = 2.0,
) -> contextlib.AbstractAsyncContextManager[str]:
    """Serve an app ``build_app`` made, with its connection guard and client-error log."""
    return serving(
        app,
        app[GUARD],
        app[CLIENT_LOG],
        app[SETTINGS].client,
        host=host,
        port=port,
        shutdown_timeout=shutdown_timeout,
    )


def build_source(settings: AdapterSettings, hub_endpoint: str | None) -> Source | None:
    if settings.dir is not None:
        return DirectorySource(settings.dir, settings.watch_interval_s or 0.5)
    if settings.bucket is not None:
        bucket_id, prefix = split_bucket(settings.bucket)
        interval = settings.watch_interval_s or 2.0
        return BucketSource(bucket_id, prefix, settings.mount_path, interval, hub_endpoint)
    return None
