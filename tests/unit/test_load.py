"""The load scraper: parsing vLLM's /metrics page (pure) and the loop's bookkeeping, on a fake
client and a fake clock (no sockets)."""

from __future__ import annotations

import gzip
from typing import Any

from proxy.config import LoadSettings
from proxy.fleet.load import LoadScraper, parse_load
from proxy.fleet.pool import ReplicaPool
from proxy.upstream.client import Reply
from proxy.upstream.errors import AnswerTimeout
from tests.support.clock import FakeClock

PAGE = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1000.0
vllm:num_requests_running_extra{engine="0"} 99
"""


def test_parse_load_sums_engines_and_averages_kv_usage() -> None:
    load = parse_load(PAGE)
    assert load is not None
    assert (load.running, load.waiting, load.preemptions) == (12.0, 2.0, 3.0)
    assert abs(load.kv_usage - 0.6) < 1e-9


def test_parse_load_reads_gzip_and_refuses_pages_without_the_figures() -> None:
    assert parse_load(gzip.compress(PAGE)) == parse_load(PAGE)
    assert parse_load(b"# nothing here\nother_metric 1\n") is None
    assert parse_load(b"vllm:num_requests_waiting NaN\n") is None
    assert parse_load(b"") is None


class FakeClient:
    """Answers /metrics with whatever the test sets, per replica URL."""

    def __init__(self) -> None:
        self.pages: dict[str, Any] = {}

    async def call(self, target: Any, method: str, path_qs: str, **_: Any) -> Reply:
        assert (method, path_qs) == ("GET", "/metrics")
        page = self.pages[target.url]
        if isinstance(page, BaseException):
            raise page
        return Reply(200, page, "text/plain")


def gauges(running: float, waiting: float, kv: float) -> bytes:
    return (
        f"vllm:num_requests_running {running}\nvllm:num_requests_waiting {waiting}\n"
        f"vllm:kv_cache_usage_perc {kv}\n"
    ).encode()


Setup = tuple[ReplicaPool, FakeClient, FakeClock, LoadScraper, list[str], list[BaseException]]


def setup(**settings: Any) -> Setup:
    clock = FakeClock()
    pool = ReplicaPool(["http://a:8000", "http://b:8000"], clock=clock)
    for replica in pool:
        pool.admit(replica)
    client = FakeClient()
    outcomes: list[str] = []
    failures: list[BaseException] = []
    scraper = LoadScraper(
        pool,
        client,  # type: ignore[arg-type]
        LoadSettings(**settings),
        clock,
        lambda task, exc: failures.append(exc),
        outcomes.append,
    )
    return pool, client, clock, scraper, outcomes, failures


async def test_a_scrape_records_figures_and_requests_that_are_not_ours() -> None:
    pool, client, _, scraper, outcomes, _ = setup()
    a, b = pool
    a.slots.inflight = 4  # as the limiter would count them
    client.pages = {a.url: gauges(5, 9, 0.2), b.url: gauges(0, 2, 0.0)}
    await scraper.scrape_all()
    assert a.reported is not None and b.reported is not None
    assert a.reported.foreign == 10.0  # 14 on the replica, 4 of them ours
    assert not a.reported.saturated  # one queue seen once is a burst, not a full replica
    assert outcomes == ["ok", "ok"]
    await scraper.scrape_all()
    again, quiet = a.reported, b.reported
    assert again is not None and again.saturated  # a queue on two scrapes in a row
    assert quiet is not None and not quiet.saturated  # 2 waiting: below waiting_high (8)


async def test_high_kv_usage_is_full_at_once() -> None:
    pool, client, _, scraper, _, _ = setup(kv_high=0.9)
    a, b = pool
    client.pages = {a.url: gauges(3, 0, 0.95), b.url: gauges(3, 0, 0.5)}
    await scraper.scrape_all()
    assert a.reported is not None and a.reported.saturated
    assert b.reported is not None and not b.reported.saturated


async def test_a_failing_replica_keeps_its_figures_until_they_are_stale() -> None:
    pool, client, clock, scraper, outcomes, _ = setup(stale_s=2.0)
    a, b = pool
    client.pages = {a.url: gauges(1, 0, 0.1), b.url: gauges(1, 0, 0.1)}
    await scraper.scrape_all()
    before = a.reported
    client.pages[a.url] = AnswerTimeout("no answer in time")  # as the real client raises it
    clock.advance(1.0)
    await scraper.scrape_all()
    assert a.reported is before  # kept while fresh
    assert outcomes.count("failed") == 1
    clock.advance(1.5)
    await scraper.scrape_all()
    assert a.reported is None  # stale: routing falls back to the proxy's own counts
    assert b.reported is not None


async def test_a_replica_out_of_routing_has_no_figures() -> None:
    pool, client, _, scraper, _, _ = setup()
    a, b = pool
    client.pages = {a.url: gauges(1, 0, 0.1), b.url: gauges(1, 0, 0.1)}
    await scraper.scrape_all()
    pool.eject(a, "probe", "down")
    await scraper.scrape_all()
    assert a.reported is None
    assert b.reported is not None


async def test_the_loop_survives_an_unexpected_error() -> None:
    pool, client, _, scraper, _, failures = setup()
    a, b = pool
    client.pages = {a.url: RuntimeError("bug"), b.url: gauges(1, 0, 0.1)}
    await scraper.scrape_all()
    assert [type(e) for e in failures] == [RuntimeError]
    assert b.reported is not None  # the other replica was scraped all the same
