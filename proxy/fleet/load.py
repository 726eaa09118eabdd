"""What each replica reports of its own load, scraped from its ``/metrics`` off the request path.

Every ``interval_s`` the scraper reads each routable replica's Prometheus page (the same
upstream client and bearer token as every other control-plane call) and keeps four vLLM figures:
``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` and
``vllm:num_preemptions_total`` (summed over engines; KV usage is their mean). ``parse_load`` is
pure: one C-level regex pass over the page, whatever its size (a gzip-encoded page is inflated
first: the client asks for gzip and does not decode).

The scraper is the one writer of ``Replica.reported``:
- a good scrape sets it, with ``foreign``: the requests the replica runs or queues that this
  proxy did not send it (its own count read before and after the scrape, the larger one taken,
  so requests finishing meanwhile are not mistaken for someone else's);
- ``saturated``: KV usage at or above ``kv_high``, or at least ``waiting_high`` requests waiting
  (default 8) on two scrapes in a row: vLLM counts as waiting what its last step could not
  schedule, and a group's burst of long prompts can overflow one step's token budget without
  the replica being full; measured in the fleet simulator, a threshold of 1 sent multi-turn
  continuations away from their KV (hit rate 0.70 -> 0.60);
- a replica whose last good scrape is older than ``stale_s`` (failed scrapes, a replica that
  left routing) has ``reported`` None: routing falls back to the proxy's own counts.
A failed scrape is counted (``on_scrape("failed")``) and changes nothing else; the loop runs
through ``run_every`` and survives anything.
"""

from __future__ import annotations

import asyncio
import logging
import re
import zlib
from collections.abc import Callable

from proxy.clock import Clock, TaskFailed, run_every
from proxy.config import LoadSettings
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica, ReportedLoad
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import UpstreamError

log = logging.getLogger("proxy.load")

_SCRAPE_ERRORS: tuple[type[BaseException], ...] = (UpstreamError, zlib.error)

_PAGE_LIMIT = 16 * 1024 * 1024  # inflated bytes read of a gzip-encoded page
_SAMPLE = re.compile(
    rb"^vllm:(num_requests_running|num_requests_waiting|kv_cache_usage_perc|"
    rb"num_preemptions_total)(?:\{[^}\n]*\})?[ \t]+([-+0-9.eEinfINFaN]+)",
    re.MULTILINE,
)


def parse_load(page: bytes) -> ReportedLoad | None:
    """The four figures of a vLLM ``/metrics`` page; None when it has none of them."""
    if page[:2] == b"\x1f\x8b":
        page = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(page, _PAGE_LIMIT)
    sums = {b"num_requests_running": 0.0, b"num_requests_waiting": 0.0,
            b"num_preemptions_total": 0.0}  # fmt: skip
    kv: list[float] = []
    found = False
    for match in _SAMPLE.finditer(page):
        try:
            value = float(match[2])
        except ValueError:
            continue
        if value != value:  # NaN
            continue
        found = True
        if match[1] == b"kv_cache_usage_perc":
            kv.append(value)
        else:
            sums[match[1]] += value
    if not found:
        return None
    return ReportedLoad(
        running=sums[b"num_requests_running"],
        waiting=sums[b"num_requests_waiting"],
        kv_usage=sum(kv) / len(kv) if kv else 0.0,
        preemptions=sums[b"num_preemptions_total"],
    )


def judge(
    load: ReportedLoad, own: int, was_queued: bool, settings: LoadSettings
) -> tuple[ReportedLoad, bool]:
    """A scrape's figures with ``foreign`` and ``saturated`` filled in (``own``: the proxy's
    requests on the replica; ``was_queued``: the previous scrape showed a queue), and whether
    this one shows a queue."""
    queued = load.waiting >= settings.waiting_high
    saturated = load.kv_usage >= settings.kv_high or (queued and was_queued)
    foreign = max(0.0, load.running + load.waiting - own)
    judged = ReportedLoad(
        load.running, load.waiting, load.kv_usage, load.preemptions, foreign, saturated
    )
    return judged, queued


class LoadScraper:
    """Scrapes every routable replica each ``interval_s``; started and stopped by the app."""

    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        settings: LoadSettings,
        clock: Clock,
        failed: TaskFailed,
        on_scrape: Callable[[str], None] | None = None,
    ) -> None:
        self._pool = pool
        self._client = client
        self._settings = settings
        self._clock = clock
        self._failed = failed
        self._on_scrape = on_scrape
        self._at: dict[str, float] = {}  # replica id -> clock time of its last good scrape
        self._queued: dict[str, bool] = {}  # replica id -> its last scrape showed a queue

    async def run(self) -> None:
        await run_every(
            self._clock,
            lambda: self._settings.interval_s,
            self.scrape_all,
            task="load",
            failed=self._failed,
        )

    async def scrape_all(self) -> None:
        """One round: scrape the routable replicas, then drop what has gone stale."""
        results = await asyncio.gather(
            *(self.scrape(replica) for replica in self._pool.routable()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                self._failed("load", result)
            elif isinstance(result, BaseException):
                raise result
        self.expire()

    async def scrape(self, replica: Replica) -> None:
        own = replica.inflight
        try:
            reply = await self._client.call(
                replica, "GET", "/metrics", timeout_s=self._settings.timeout_s
            )
            load = parse_load(reply.body) if reply.status == 200 else None
        except _SCRAPE_ERRORS as exc:
            log.debug("replica %s: load scrape failed: %s", replica.id, type(exc).__name__)
            load = None
        if load is None:
            self._count("failed")
            return
        was_queued = self._queued.get(replica.id, False)
        own = max(own, replica.inflight)
        replica.reported, self._queued[replica.id] = judge(load, own, was_queued, self._settings)
        self._at[replica.id] = self._clock.monotonic()
        self._count("ok")

    def expire(self) -> None:
        """Forget reports older than ``stale_s`` (and those of replicas no longer routable)."""
        now = self._clock.monotonic()
        routable = {r.id for r in self._pool.routable()}
        for gone in self._at.keys() - set(self._pool.ids):
            del self._at[gone]
            self._queued.pop(gone, None)
        for replica in self._pool:
            at = self._at.get(replica.id)
            if replica.id not in routable or at is None or now - at > self._settings.stale_s:
                replica.reported = None
                self._at.pop(replica.id, None)
                self._queued.pop(replica.id, None)

    def _count(self, outcome: str) -> None:
        if self._on_scrape is not None:
            self._on_scrape(outcome)
