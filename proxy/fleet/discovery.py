"""Replica discovery: ``--discover hf-jobs:LABEL=VALUE`` or ``--discover dns:NAME:PORT``.

Every ``interval_s`` the source is asked which replicas exist:

- ``hf-jobs``: the Jobs API (huggingface_hub's ``list_jobs``, in ``--discover-namespace``,
  default the token's user) lists the jobs carrying that label; each RUNNING job the token's own
  user started (``started_by``) is a replica, at its exposed URL for ``port``.
- ``dns``: NAME is resolved (every A and AAAA record, as ``getaddrinfo`` returns them); each
  address is a replica at ``http://ADDRESS:PORT`` (IPv6 in brackets). This is how an HF Jobs
  network group is seen from inside: every job claiming an alias answers for
  ``${HF_NETWORK_GROUP_PREFIX}<alias>``, on every port, without the public edge.

New URLs join the pool PENDING: the health loop probes them and pushes the adapter window into
them before they take traffic, so an address that does not answer is simply never routable. A
discovered replica the source no longer lists is drained, then removed once its in-flight
requests are done. A lookup that fails (the Hub unreachable, a name that does not resolve)
changes nothing and is logged once until it succeeds again. Replicas given with ``--replica-urls``
are never removed by discovery.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from proxy.clock import Clock, TaskFailed, run_every
from proxy.config import DnsName, JobsLabel, check_replica_url
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import replica_id

log = logging.getLogger("proxy.discovery")

# host, port -> the addresses a name resolves to (default: the event loop's getaddrinfo)
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


def exposed_url(job: Any, port: int) -> str | None:
    """The job's exposed URL for ``port`` (``https://<id>--<port>.hf.jobs``), if any."""
    urls = getattr(job, "expose_urls", None) or getattr(job.status, "expose_urls", None) or []
    for url in urls:
        if f"--{port}." in url:
            return str(url).rstrip("/")
    return str(urls[0]).rstrip("/") if len(urls) == 1 else None


def address_url(address: str, port: int) -> str:
    """``http://ADDRESS:PORT``, an IPv6 address in brackets (its zone dropped)."""
    address = address.split("%", 1)[0]
    shown = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"http://{shown}:{port}"


async def resolve(name: str, port: int) -> list[str]:
    """Every address ``name`` resolves to for a TCP connection, in the resolver's order."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class JobsLookup:
    """The exposed URLs of the RUNNING jobs labelled ``selector`` (a blocking client call, run in
    a worker thread)."""

    def __init__(
        self,
        selector: JobsLabel,
        port: int,
        endpoint: str | None,
        token: str | None,
        namespace: str | None,
    ) -> None:
        self.selector = selector
        self._port = port
        self._endpoint = endpoint
        self._token = token
        self.namespace = namespace  # the jobs' owner; default: the token's user
        self.user_id: str | None = None  # the token's user: only the jobs it started count
        self._foreign: set[str] = set()  # job ids skipped as someone else's (logged once)

    def __str__(self) -> str:
        return f"HF jobs labelled {self.selector.label}={self.selector.value}"

    async def __call__(self) -> set[str]:
        return await asyncio.to_thread(self._running_urls)

    def _running_urls(self) -> set[str]:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=self._endpoint, token=self._token)
        if self.user_id is None:
            me = api.whoami()
            self.user_id = str(me["id"])
            # huggingface_hub's own default namespace asks the public Hub, whatever the endpoint.
            self.namespace = self.namespace or str(me["name"])
        labels = {self.selector.label: self.selector.value}
        urls = set()
        for job in api.list_jobs(labels=labels, namespace=self.namespace):
            if getattr(job.status, "stage", None) != "RUNNING":
                continue
            if not started_by(job, self.user_id):
                if job.id not in self._foreign:
                    self._foreign.add(job.id)
                    log.warning(
                        "job %s carries %s=%s but was not started by this token's user: not a "
                        "replica of this run (its token is never sent there)",
                        job.id, self.selector.label, self.selector.value,
                    )  # fmt: skip
                continue
            url = exposed_url(job, self._port)
            if url is not None:
                urls.add(url)
        return urls


def started_by(job: Any, user_id: str) -> bool:
    """Whether the user ``user_id`` started ``job``: its initiator (``JobInfo.initiator``), or,
    where the service names none, its owner being that user. In an organisation's namespace
    any member may start a job carrying the run's label; only the ones the token's own user
    started (``deploy up`` with that token, or HF Jobs retrying one of them) are the run's."""
    initiator = getattr(job, "initiator", None)
    if initiator is not None:
        return bool(initiator.type == "user" and initiator.id == user_id)
    owner = getattr(job, "owner", None)
    return owner is not None and owner.type == "user" and owner.id == user_id


class DnsLookup:
    """``http://ADDRESS:PORT`` for every address ``name`` resolves to."""

    def __init__(self, name: DnsName, resolver: Resolver = resolve) -> None:
        self.name = name
        self._resolve = resolver

    def __str__(self) -> str:
        return f"the addresses of {self.name.name} (port {self.name.port})"

    async def __call__(self) -> set[str]:
        addresses = await self._resolve(self.name.name, self.name.port)
        return {address_url(address, self.name.port) for address in addresses}


class Discovery:
    def __init__(
        self,
        source: JobsLabel | DnsName,
        pool: ReplicaPool,
        clock: Clock,
        *,
        failed: TaskFailed,
        interval_s: float,
        port: int = 8000,
        endpoint: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
        resolver: Resolver = resolve,
    ) -> None:
        self.lookup: JobsLookup | DnsLookup = (
            JobsLookup(source, port, endpoint, token, namespace)
            if isinstance(source, JobsLabel)
            else DnsLookup(source, resolver)
        )
        self._pool = pool
        self._clock = clock
        self._failed = failed
        self.interval_s = interval_s
        self.discovered: set[str] = set()  # replica ids this loop added
        self.refused: set[str] = set()  # URLs that are not replica URLs (logged once)
        self.last_error = ""

    async def run(self) -> None:
        await run_every(
            self._clock, lambda: self.interval_s, self.poll, task="discovery", failed=self._failed
        )

    async def poll(self) -> None:
        try:
            urls = await self.lookup()
        except Exception as exc:  # the Hub or DNS being unreachable must not stop discovery
            message = f"{type(exc).__name__}: {exc}"
            if message != self.last_error:
                log.warning("discovery of %s failed (will retry): %s", self.lookup, message)
            self.last_error = message
            return
        self.last_error = ""
        self.apply(urls)

    def apply(self, urls: set[str]) -> None:
        """Add the new URLs; drain, then remove, discovered replicas the source no longer
        lists. A URL that is not a replica URL (a job exposing ``...?q=1``) is skipped, logged
        once: it stops neither the others from joining nor the departed from leaving."""
        found: dict[str, str] = {}
        for url in sorted(urls):
            try:
                found[replica_id(check_replica_url(url))] = url
            except ValueError as exc:
                if url not in self.refused:
                    log.warning("discovered URL %r is not a replica URL, skipped: %s", url, exc)
                self.refused.add(url)
        for rid, url in found.items():
            if self._pool.get(rid) is None:
                log.info("discovered replica %s (%s)", rid, self.lookup)
                self._pool.add(url)
                self.discovered.add(rid)
        for rid in sorted(self.discovered - found.keys()):
            replica = self._pool.get(rid)
            if replica is None:
                self.discovered.discard(rid)
            elif replica.inflight == 0:
                log.info("replica %s left (no longer among %s): removed", rid, self.lookup)
                self._pool.remove(rid)
                self.discovered.discard(rid)
            elif not replica.draining:
                log.info("replica %s is going away: draining %d request(s)", rid, replica.inflight)
                self._pool.drain(replica, True)
