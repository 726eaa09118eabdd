"""Simulated replicas and a proxy in front of them, on loopback, for integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from proxy.app import PROXY, build_app, serve
from proxy.clock import Clock
from proxy.config import Settings
from proxy.fleet.pool import NO_REPLICA_GRACE_S, ReplicaPool
from replica_entry.sim import SIM_STATE, Faults, SimSettings, build_sim_app
from tests.support.freeze import Relay, relay
from tests.support.servers import serve as serve_sim
from tests.support.waiting import eventually, wait_for

__all__ = [
    "FAST_HEALTH",
    "Sim",
    "SimServer",
    "Stack",
    "eventually",
    "run_sim",
    "run_stack",
    "serve_sim_app",
    "wait_for",
]

# Fast probing so ejection and readmission take tens of milliseconds in tests.
FAST_HEALTH = {"health_interval": 0.05, "health_timeout": 0.5}


@dataclass
class Sim:
    url: str
    app: web.Application
    exits: AsyncExitStack = field(repr=False, default_factory=AsyncExitStack)

    @property
    def state(self) -> Any:
        return self.app[SIM_STATE]

    @property
    def id(self) -> str:
        """The replica id the proxy gives this sim (host:port)."""
        return self.url.split("//", 1)[1]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def stop(self) -> None:
        """Close the server: its port refuses connections from now on (a crashed replica)."""
        await self.exits.aclose()


@dataclass
class Stack:
    sims: list[Sim]
    proxy_url: str
    proxy_app: web.Application
    session: aiohttp.ClientSession
    exits: AsyncExitStack = field(repr=False, default_factory=AsyncExitStack)
    relays: list[Relay] = field(default_factory=list)

    @property
    def pool(self) -> ReplicaPool:
        return self.proxy_app[PROXY].fleet.pool


@asynccontextmanager
async def run_sim(port: int = 0, **settings: Any) -> AsyncIterator[Sim]:
    """A simulated replica on ``host`` (a ``settings`` key; default 127.0.0.1) and ``port``."""
    host = str(settings.pop("host", "127.0.0.1"))
    faults = settings.pop("faults", None)
    sim_settings = SimSettings(**settings, faults=Faults(**(faults or {})))
    app = build_sim_app(sim_settings)
    exits = AsyncExitStack()
    url = await exits.enter_async_context(serve_sim(app, host=host, port=port))
    try:
        yield Sim(url, app, exits)
    finally:
        await exits.aclose()


SimServer = Callable[..., AbstractAsyncContextManager[tuple[str, web.Application]]]


@asynccontextmanager
async def serve_sim_app(
    clock: Callable[[], float] | None = None, **overrides: Any
) -> AsyncIterator[tuple[str, web.Application]]:
    """A simulated replica with ``overrides`` of its settings (and ``clock``): URL and app."""
    settings = SimSettings(**overrides)
    app = build_sim_app(settings) if clock is None else build_sim_app(settings, clock=clock)
    async with serve_sim(app) as url:
        yield url, app


@asynccontextmanager
async def run_stack(
    n: int = 3,
    *,
    sim: dict[str, Any] | None = None,
    sims: list[dict[str, Any]] | None = None,
    ready: bool = True,
    relays: bool = False,
    extra: tuple[str, ...] = (),
    tracer: Any = None,
    grace_s: float = NO_REPLICA_GRACE_S,
    clock: Clock | None = None,
    **proxy_settings: Any,
) -> AsyncIterator[Stack]:
    """``n`` simulated replicas and a proxy in front of them; waits until all are routable.

    ``relays``: the proxy reaches each replica through a freezable relay (``stack.relays``).
    ``extra``: more replica URLs (other servers: e.g. ``tests.support.scripted``), after the sims.
    ``grace_s``: how long the fleet (or a model's replicas) may be out before requests for it
    are refused (``proxy.fleet.outage``).
    ``clock``: the proxy's clock (a ``tests.support.clock.FakeClock`` moves only when the test
    says; the health loop's first round still runs at once, so the fleet becomes routable).
    """
    async with AsyncExitStack() as exits:
        specs = sims if sims is not None else [dict(sim or {}) for _ in range(n)]
        replicas = [await exits.enter_async_context(run_sim(**spec)) for spec in specs]
        links = [await exits.enter_async_context(relay(s.url)) for s in replicas] if relays else []
        urls = [link.url for link in links] if relays else [s.url for s in replicas]
        urls += extra
        # Port 0 unless a test names one: the store and the window's state file are per port
        # (``proxy.adapters.wiring``), and two stacks must never share them (two tests in a
        # row, or two suites at once).
        settings = Settings.model_validate(
            {"replicas": urls, "port": 0, **FAST_HEALTH, **proxy_settings}
        )
        app = build_app(settings, clock=clock, tracer=tracer, no_replica_grace_s=grace_s)
        url = await exits.enter_async_context(serve(app))
        session = await exits.enter_async_context(aiohttp.ClientSession())
        stack = Stack(replicas, url, app, session, exits, links)
        if ready:
            await wait_for(
                lambda: len(stack.pool.routable()) == len(urls), what="all replicas routable"
            )
        yield stack
