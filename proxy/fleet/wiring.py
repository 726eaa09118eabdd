"""The fleet room assembled: its parts, made from the settings in one place.

The members (``members``: the pool, the upstream client and the replicas' own views) are made
first, because the adapters room needs them; the rest (the sync, health probing, the circuit
outlier detection, the load scraper, discovery) once the adapter window exists (``build_fleet``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.clock import Clock, TaskFailed
from proxy.config import Settings
from proxy.fleet.discovery import Discovery, Resolver, resolve
from proxy.fleet.health import HealthMonitor
from proxy.fleet.info import FleetInfo
from proxy.fleet.load import LoadScraper
from proxy.fleet.outliers import Outliers
from proxy.fleet.pool import NO_REPLICA_GRACE_S, Follower, ReplicaPool
from proxy.fleet.sync import AdapterWindow, FleetSync
from proxy.upstream.client import UpstreamClient


@dataclass(frozen=True, slots=True)
class Members:
    """The replicas, the connections to them and what they report of themselves."""

    pool: ReplicaPool
    client: UpstreamClient
    info: FleetInfo


@dataclass(frozen=True, slots=True)
class Fleet:
    pool: ReplicaPool
    client: UpstreamClient
    info: FleetInfo
    sync: FleetSync
    health: HealthMonitor
    outliers: Outliers
    load: LoadScraper | None  # None with --load-interval 0
    discovery: Discovery | None  # None without --discover


def members(
    settings: Settings,
    clock: Clock,
    followers: Sequence[Follower] = (),
    grace_s: float = NO_REPLICA_GRACE_S,
) -> Members:
    """The pool (``followers``: told of each of its changes; ``grace_s``: how long the fleet
    may be dark before it is an outage), the client, the replicas' views."""
    pool = ReplicaPool(settings.replica_urls, clock=clock, followers=followers, grace_s=grace_s)
    client = UpstreamClient(settings.upstream)
    return Members(pool, client, FleetInfo(client, pool))


def build_fleet(
    settings: Settings,
    members: Members,
    adapters: AdapterWindow,
    clock: Clock,
    failed: TaskFailed,
    record_load_scrape: Callable[[str], None],
    resolver: Resolver = resolve,
) -> Fleet:
    pool, client, upstream = members.pool, members.client, settings.upstream
    sync = FleetSync(
        pool, client, members.info, adapters, clock, forward_pause=settings.forward_pause
    )
    load = None
    if settings.load.interval_s > 0:
        load = LoadScraper(pool, client, settings.load, clock, failed, record_load_scrape)
    discovery = None
    if settings.discover_source is not None:
        token = upstream.token
        discovery = Discovery(
            settings.discover_source,
            pool,
            clock,
            failed=failed,
            interval_s=settings.discover_interval,
            endpoint=settings.hub_endpoint,
            token=token.get_secret_value() if token is not None else None,
            namespace=settings.discover_namespace,
            resolver=resolver,
        )
    return Fleet(
        pool,
        client,
        members.info,
        sync,
        HealthMonitor(pool, client, settings.health, clock, sync, failed),
        Outliers(
            pool,
            gateway_failures=upstream.gateway_failures,
            breaker_failures=upstream.breaker_failures,
            breaker_cooldown_s=upstream.breaker_cooldown_s,
            max_percent=upstream.max_ejection_percent,
        ),
        load,
        discovery,
    )
