"""Discovery's membership rules (no network): add new jobs, drain then remove departed ones."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from proxy.config import parse_discover_spec as parse_spec
from proxy.fleet.discovery import JobsDiscovery, exposed_url
from proxy.fleet.pool import ReplicaPool
from tests.support.clock import FakeClock


def test_parse_spec() -> None:
    assert parse_spec("hf-jobs:rollout-run=exp1") == ("rollout-run", "exp1")
    for bad in ("jobs:a=b", "hf-jobs:a", "hf-jobs:=b", "hf-jobs:a="):
        with pytest.raises(ValueError, match="hf-jobs:LABEL=VALUE"):
            parse_spec(bad)


def test_exposed_url_picks_the_port() -> None:
    job = SimpleNamespace(
        expose_urls=["https://abc--9000.hf.jobs", "https://abc--8000.hf.jobs/"],
        status=SimpleNamespace(expose_urls=None),
    )
    assert exposed_url(job, 8000) == "https://abc--8000.hf.jobs"
    assert (
        exposed_url(
            SimpleNamespace(expose_urls=None, status=SimpleNamespace(expose_urls=None)), 8000
        )
        is None
    )


def test_jobs_come_and_go_static_replicas_stay() -> None:
    clock = FakeClock()
    pool = ReplicaPool(["http://static:8000"], clock=clock)
    failures: list[BaseException] = []
    discovery = JobsDiscovery(
        "hf-jobs:run=a", pool, clock, failed=lambda _, exc: failures.append(exc), interval_s=5
    )
    discovery.apply({"https://j1--8000.hf.jobs", "https://j2--8000.hf.jobs"})
    assert {r.id for r in pool} == {"static:8000", "j1--8000.hf.jobs:443", "j2--8000.hf.jobs:443"}
    busy = pool.get("j1--8000.hf.jobs:443")
    assert busy is not None
    busy.inflight = 2
    discovery.apply({"https://j2--8000.hf.jobs"})  # j1's job ended while serving
    assert busy.draining
    assert pool.get("j1--8000.hf.jobs:443") is busy
    busy.inflight = 0
    discovery.apply({"https://j2--8000.hf.jobs"})
    assert pool.get("j1--8000.hf.jobs:443") is None
    discovery.apply(set())
    assert [r.id for r in pool] == ["static:8000"]


def test_one_malformed_job_url_stops_nothing_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    pool = ReplicaPool([], clock=clock)
    discovery = JobsDiscovery("hf-jobs:run=a", pool, clock, failed=lambda *_: None, interval_s=5)
    discovery.apply({"https://j1--8000.hf.jobs", "https://j2--8000.hf.jobs"})
    bad = "https://j3--8000.hf.jobs/?q=1"
    for _ in range(3):
        discovery.apply({"https://j1--8000.hf.jobs", bad, "https://j4--8000.hf.jobs"})
    assert {r.id for r in pool} == {"j1--8000.hf.jobs:443", "j4--8000.hf.jobs:443"}  # j2 left
    warnings = [r for r in caplog.records if "not a replica URL" in r.getMessage()]
    assert len(warnings) == 1 and "?q=1" in warnings[0].getMessage()
    assert not [r for r in caplog.records if "discovered replica j3" in r.getMessage()]
