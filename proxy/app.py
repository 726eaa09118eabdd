"""Assembles the proxy: settings -> components -> routes -> an aiohttp Application.

``build_app`` must be called with an event loop running (the upstream session binds to it).
Lifecycle (``cleanup_ctx``, started in order, stopped in reverse): the upstream client, then the
health loop (first probe round at once, so a fleet that is up is routable within milliseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiohttp import web

from proxy.adapters.broadcast import Broadcaster, RetryPolicy
from proxy.adapters.registry import Registry
from proxy.adapters.service import AdapterService
from proxy.adapters.watcher import BucketSource, DirectorySource, Source, Watcher
from proxy.admin import Admin
from proxy.auth import KeyCheck
from proxy.client import UpstreamClient
from proxy.clock import Clock, RealClock
from proxy.config import AdapterSettings, Settings
from proxy.discovery import JobsDiscovery
from proxy.fanout import FanOut
from proxy.fleet import Fleet
from proxy.forward import Forwarder
from proxy.handlers import Handlers
from proxy.health import HealthMonitor
from proxy.limiter import Limiter
from proxy.logs import secret_values
from proxy.metrics import Metrics
from proxy.routing import build_policy
from proxy.upstreams import ReplicaPool

log = logging.getLogger("proxy")

POOL = web.AppKey("pool", ReplicaPool)
FLEET = web.AppKey("fleet", Fleet)
LIMITER = web.AppKey("limiter", Limiter)
METRICS = web.AppKey("metrics", Metrics)
HEALTH = web.AppKey("health", HealthMonitor)
CLIENT = web.AppKey("client", UpstreamClient)
ADAPTERS = web.AppKey("adapters", AdapterService)
WATCHER = web.AppKey("watcher", Watcher)
DISCOVERY = web.AppKey("discovery", JobsDiscovery)

PASSTHROUGH_GET = ("/version", "/get_world_size", "/ping")
PASSTHROUGH_POST = ("/tokenize", "/detokenize", "/ping")
CONTROL = ("/pause", "/resume", "/reset_prefix_cache")


# How the app must be served (cli and tests alike): aiohttp cancels a handler whose client has
# gone, which is what closes the upstream request and so cancels the generation on the replica.
RUNNER_OPTIONS: dict[str, Any] = {"handler_cancellation": True, "access_log": None}


def build_app(settings: Settings, *, clock: Clock | None = None) -> web.Application:
    clock = clock or RealClock()
    pool = ReplicaPool(settings.replicas)
    client = UpstreamClient(settings.upstream)
    limiter = Limiter(settings.limits, pool, clock)
    pool.on_change = limiter.wake
    policy = build_policy(settings.policy)
    registry = Registry(window_override=settings.adapters.window)
    adapter_cfg = settings.adapters
    retry = RetryPolicy(
        adapter_cfg.load_deadline_s, adapter_cfg.retry_min_s, adapter_cfg.retry_max_s
    )
    broadcaster = Broadcaster(pool, client, registry, clock, retry)
    source = build_source(adapter_cfg, settings.hub_endpoint)
    metrics = Metrics(
        pool,
        lambda: limiter.inflight,
        lambda: limiter.queued,
        policy.stats,
        lambda: adapters.stats(),
    )
    adapters = AdapterService(
        broadcaster, metrics, secret_values(settings), has_source=source is not None
    )
    fleet = Fleet(pool, client, adapters)
    forwarder = Forwarder(pool, client, limiter, policy, metrics, adapters)
    fanout = FanOut(pool, client, fleet, metrics, secret_values(settings))
    monitor = HealthMonitor(pool, client, settings.health, clock, fleet)
    handlers = Handlers(
        pool=pool,
        fleet=fleet,
        limiter=limiter,
        forwarder=forwarder,
        fanout=fanout,
        adapters=adapters,
        metrics=metrics,
        api_key=KeyCheck(settings.api_key, "API"),
        max_body_bytes=settings.max_body_bytes,
        policy=policy,
    )

    app = web.Application(client_max_size=settings.max_body_bytes)
    app[POOL] = pool
    app[FLEET] = fleet
    app[LIMITER] = limiter
    app[METRICS] = metrics
    app[HEALTH] = monitor
    app[CLIENT] = client
    app[ADAPTERS] = adapters
    if source is not None:
        app[WATCHER] = Watcher(source, clock, adapters.source_changed)
    if settings.discover is not None:
        token = settings.upstream.token
        app[DISCOVERY] = JobsDiscovery(
            settings.discover,
            pool,
            clock,
            interval_s=settings.discover_interval,
            endpoint=settings.hub_endpoint,
            token=token.get_secret_value() if token is not None else None,
            namespace=settings.discover_namespace,
        )
    _add_routes(app, handlers)
    app.add_routes(Admin(pool, KeyCheck(settings.admin_key, "admin")).routes())
    app.cleanup_ctx.append(_client_ctx)
    app.cleanup_ctx.append(_adapters_ctx)
    app.cleanup_ctx.append(_health_ctx)
    app.cleanup_ctx.append(_discovery_ctx)
    return app


def _add_routes(app: web.Application, h: Handlers) -> None:
    g = h.guarded
    router = app.router
    router.add_post("/v1/completions", g("completions", h.generation("completions", b"prompt")))
    router.add_post(
        "/v1/chat/completions",
        g("chat_completions", h.generation("chat_completions", b"messages")),
    )
    router.add_post("/v1/load_lora_adapter", g("load_lora_adapter", h.load))
    router.add_post("/v1/unload_lora_adapter", g("unload_lora_adapter", h.unload))
    for path in CONTROL:
        router.add_post(path, g(path.lstrip("/"), h.control))
    router.add_get("/health", g("health", h.health, open_route=True))
    router.add_get("/server_info", g("server_info", h.server_info))
    router.add_get("/v1/models", g("models", h.models))
    router.add_get("/metrics", g("metrics", h.metrics_page))
    router.add_get("/proxy/status", g("status", h.status))
    for path in PASSTHROUGH_GET:
        router.add_get(path, g("passthrough", h.passthrough))
    for path in PASSTHROUGH_POST:
        router.add_post(path, g("passthrough", h.passthrough))


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
        log.info(
            "discovering replicas from HF jobs labelled %s=%s", discovery.label, discovery.value
        )
    async with _running(discovery.run() if discovery else None, "replica-discovery"):
        yield


async def _health_ctx(app: web.Application) -> AsyncIterator[None]:
    async with _running(app[HEALTH].run(), "health-monitor"):
        yield


def build_source(settings: AdapterSettings, hub_endpoint: str | None) -> Source | None:
    if settings.dir is not None:
        return DirectorySource(settings.dir, settings.watch_interval_s or 0.5)
    if settings.bucket is not None:
        interval = settings.watch_interval_s or 2.0
        return BucketSource(settings.bucket, settings.mount_path, interval, hub_endpoint)
    return None
