"""Replica discovery from the HF Jobs API: ``--discover hf-jobs:LABEL=VALUE``.

The jobs are looked up in ``--discover-namespace`` (default: the token's user).

Every ``interval_s`` the Jobs API is asked (through huggingface_hub's ``list_jobs``) for the jobs
carrying that label; each RUNNING job's exposed URL for ``port`` is a replica. New URLs join the
pool (PENDING: the health loop probes and syncs them before they take traffic); a discovered
replica whose job is gone or no longer RUNNING is drained, then removed once its in-flight
requests are done. Replicas given with ``--replicas`` are never removed by discovery.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from proxy.clock import Clock, Failed, run_every
from proxy.config import check_replica_url, parse_discover_spec
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import replica_id

log = logging.getLogger("proxy.discovery")


def exposed_url(job: Any, port: int) -> str | None:
    """The job's exposed URL for ``port`` (``https://<id>--<port>.hf.jobs``), if any."""
    urls = getattr(job, "expose_urls", None) or getattr(job.status, "expose_urls", None) or []
    for url in urls:
        if f"--{port}." in url:
            return str(url).rstrip("/")
    return str(urls[0]).rstrip("/") if len(urls) == 1 else None


class JobsDiscovery:
    def __init__(
        self,
        spec: str,
        pool: ReplicaPool,
        clock: Clock,
        *,
        failed: Failed,
        interval_s: float,
        port: int = 8000,
        endpoint: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
    ) -> None:
        self.label, self.value = parse_discover_spec(spec)
        self._pool = pool
        self._clock = clock
        self._failed = failed
        self.interval_s = interval_s
        self._port = port
        self._endpoint = endpoint
        self._token = token
        self.namespace = namespace  # the jobs' owner; default: the token's user
        self.discovered: set[str] = set()  # replica ids this loop added
        self.refused: set[str] = set()  # job URLs that are not replica URLs (logged once)
        self.last_error = ""

    async def run(self) -> None:
        await run_every(
            self._clock, lambda: self.interval_s, self.poll, task="discovery", failed=self._failed
        )

    async def poll(self) -> None:
        try:
            urls = await asyncio.to_thread(self._running_urls)
        except Exception as exc:  # the Hub being unreachable must not stop discovery
            message = f"{type(exc).__name__}: {exc}"
            if message != self.last_error:
                log.warning("job discovery failed (will retry): %s", message)
            self.last_error = message
            return
        self.last_error = ""
        self.apply(urls)

    def _running_urls(self) -> set[str]:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=self._endpoint, token=self._token)
        if self.namespace is None:
            # huggingface_hub's own default asks the public Hub whoever the endpoint is.
            self.namespace = str(api.whoami()["name"])
        urls = set()
        jobs = api.list_jobs(labels={self.label: self.value}, namespace=self.namespace)
        for job in jobs:
            if getattr(job.status, "stage", None) != "RUNNING":
                continue
            url = exposed_url(job, self._port)
            if url is not None:
                urls.add(url)
        return urls

    def apply(self, urls: set[str]) -> None:
        """Add the new URLs; drain, then remove, discovered replicas whose jobs are gone. A URL
        that is not a replica URL (a job exposing ``...?q=1``) is skipped, logged once: it
        stops neither the others from joining nor the departed from leaving."""
        found: dict[str, str] = {}
        for url in sorted(urls):
            try:
                found[replica_id(check_replica_url(url))] = url
            except ValueError as exc:
                if url not in self.refused:
                    log.warning("job URL %r is not a replica URL, skipped: %s", url, exc)
                self.refused.add(url)
        for rid, url in found.items():
            if self._pool.get(rid) is None:
                log.info("discovered replica %s (job label %s=%s)", rid, self.label, self.value)
                self._pool.add(url)
                self.discovered.add(rid)
        for rid in sorted(self.discovered - found.keys()):
            replica = self._pool.get(rid)
            if replica is None:
                self.discovered.discard(rid)
            elif replica.inflight == 0:
                log.info("replica %s left (its job is gone): removed", rid)
                self._pool.remove(rid)
                self.discovered.discard(rid)
            elif not replica.draining:
                log.info("replica %s is going away: draining %d request(s)", rid, replica.inflight)
                self._pool.drain(replica, True)
