"""Discovery's membership rules (no network): add new jobs, drain then remove departed ones."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from proxy.config import DnsName, JobsLabel
from proxy.config import parse_discover_spec as parse_spec
from proxy.fleet.discovery import Discovery, address_url, exposed_url, started_by
from proxy.fleet.pool import ReplicaPool
from tests.support.clock import FakeClock


def test_parse_spec() -> None:
    assert parse_spec("hf-jobs:rollout-run=exp1") == JobsLabel("rollout-run", "exp1")
    assert parse_spec("dns:rollout-replica:8000") == DnsName("rollout-replica", 8000)
    assert parse_spec("dns:[::1]:9000") == DnsName("::1", 9000)
    bad_specs = ("jobs:a=b", "hf-jobs:a", "hf-jobs:=b", "hf-jobs:a=", "dns:name", "dns::80",
                 "dns:name:0", "dns:name:70000", "dns:name:http")  # fmt: skip
    for bad in bad_specs:
        with pytest.raises(ValueError, match="hf-jobs:LABEL=VALUE or dns:NAME:PORT"):
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
    discovery = Discovery(
        parse_spec("hf-jobs:run=a"),
        pool,
        clock,
        failed=lambda _, exc: failures.append(exc),
        interval_s=5,
    )
    discovery.apply({"https://j1--8000.hf.jobs", "https://j2--8000.hf.jobs"})
    assert {r.id for r in pool} == {"static:8000", "j1--8000.hf.jobs:443", "j2--8000.hf.jobs:443"}
    busy = pool.get("j1--8000.hf.jobs:443")
    assert busy is not None
    busy.slots.inflight = 2  # as the limiter would count them
    discovery.apply({"https://j2--8000.hf.jobs"})  # j1's job ended while serving
    assert busy.draining
    assert pool.get("j1--8000.hf.jobs:443") is busy
    busy.slots.inflight = 0
    discovery.apply({"https://j2--8000.hf.jobs"})
    assert pool.get("j1--8000.hf.jobs:443") is None
    discovery.apply(set())
    assert [r.id for r in pool] == ["static:8000"]


def test_one_malformed_job_url_stops_nothing_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    pool = ReplicaPool([], clock=clock)
    discovery = Discovery(
        parse_spec("hf-jobs:run=a"), pool, clock, failed=lambda *_: None, interval_s=5
    )
    discovery.apply({"https://j1--8000.hf.jobs", "https://j2--8000.hf.jobs"})
    bad = "https://j3--8000.hf.jobs/?q=1"
    for _ in range(3):
        discovery.apply({"https://j1--8000.hf.jobs", bad, "https://j4--8000.hf.jobs"})
    assert {r.id for r in pool} == {"j1--8000.hf.jobs:443", "j4--8000.hf.jobs:443"}  # j2 left
    warnings = [r for r in caplog.records if "not a replica URL" in r.getMessage()]
    assert len(warnings) == 1 and "?q=1" in warnings[0].getMessage()
    assert not [r for r in caplog.records if "discovered replica j3" in r.getMessage()]


def test_addresses_become_plain_http_urls_ipv6_in_brackets() -> None:
    assert address_url("10.0.0.7", 8000) == "http://10.0.0.7:8000"
    assert address_url("fd00::7", 8000) == "http://[fd00::7]:8000"
    assert address_url("fe80::1%eth0", 8000) == "http://[fe80::1]:8000"


async def test_a_name_s_addresses_come_and_go_as_it_resolves() -> None:
    """The HF network group's alias: members join and leave as the name's records change."""
    answers: list[list[str] | Exception] = [
        ["10.0.0.1", "fd00::2"],
        ["10.0.0.1", "fd00::2", "10.0.0.3"],
        OSError("name does not resolve"),  # a failed lookup changes nothing
        ["10.0.0.3"],
    ]

    async def resolver(name: str, port: int) -> list[str]:
        assert (name, port) == ("rollout-replica", 8000)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    clock = FakeClock()
    pool = ReplicaPool(["http://static:8000"], clock=clock)
    discovery = Discovery(
        parse_spec("dns:rollout-replica:8000"), pool, clock, failed=lambda *_: None, interval_s=5,
        resolver=resolver,
    )  # fmt: skip
    await discovery.poll()
    urls = {"http://static:8000", "http://10.0.0.1:8000", "http://[fd00::2]:8000"}
    assert {r.url for r in pool} == urls
    await discovery.poll()
    assert {r.url for r in pool} == urls | {"http://10.0.0.3:8000"}
    await discovery.poll()
    assert discovery.last_error == "OSError: name does not resolve" and len(pool) == 4
    await discovery.poll()
    assert {r.url for r in pool} == {"http://static:8000", "http://10.0.0.3:8000"}
    assert discovery.last_error == ""


def test_a_job_is_the_runs_only_if_the_tokens_user_started_it() -> None:
    def job(initiator: tuple[str, str] | None, owner: tuple[str, str]) -> SimpleNamespace:
        started = None if initiator is None else SimpleNamespace(type=initiator[0], id=initiator[1])
        return SimpleNamespace(initiator=started, owner=SimpleNamespace(type=owner[0], id=owner[1]))

    assert started_by(job(("user", "me"), ("org", "team")), "me")
    assert not started_by(job(("user", "someone"), ("org", "team")), "me")
    assert not started_by(job(("scheduled-job", "me"), ("user", "me")), "me")
    # A service that names no initiator: the owner must be the user itself, never an org.
    assert started_by(job(None, ("user", "me")), "me")
    assert not started_by(job(None, ("org", "me")), "me")
