"""Fixtures: the Jobs stand-in and simulated replicas served from a background thread, a fake
clock, and ``Cli`` to run ``deploy.cli.main`` against them with the real huggingface_hub client."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from deploy.cli import Runtime, main
from deploy.jobs import HubJobs
from deploy.plan import RunPlan
from replica_entry.sim import Faults, SimSettings, build_sim_app
from tests.support.hub_buckets import build_cas_app
from tests.support.hub_jobs import BackgroundServers, JobsHub, build_jobs_hub_app, require_bearer

TOKEN = "hf_standin_0123456789abcdef"


class FakeClock:
    """Time moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def wall(self) -> float:
        return 1_767_225_600.0  # 2026-01-01T00:00:00Z


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Stand:
    hub: JobsHub
    url: str
    servers: BackgroundServers
    clock: FakeClock
    published: list[tuple[str, str]] = field(default_factory=list)

    def replica(self, job_name: str, *, token: str = TOKEN, unhealthy: bool = False) -> str:
        """A simulated replica behind the bearer check, as ``job_name``'s exposed port."""
        app = build_sim_app(SimSettings(faults=Faults(unhealthy=unhealthy)))
        return self.exposed(job_name, app, token=token)

    def exposed(self, job_name: str, app: web.Application, *, token: str = TOKEN) -> str:
        url = self.servers.start(require_bearer(app, token))
        self.hub.expose(job_name, url)
        return url

    def publish(self, jobs: HubJobs, plan: RunPlan, say: object) -> None:
        self.published.append((plan.bucket, plan.code_dir))

    def cli(self, *argv: str, token: str | None = TOKEN) -> Result:
        out, err = io.StringIO(), io.StringIO()
        runtime = Runtime(
            clock=self.clock, token=lambda: token, publish=self.publish, out=out, err=err
        )
        code = main([*argv[:1], "--hub-endpoint", self.url, *argv[1:]], runtime)
        return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def servers() -> Iterator[BackgroundServers]:
    running = BackgroundServers()
    yield running
    running.close()


@pytest.fixture
def stand(servers: BackgroundServers) -> Stand:
    clock = FakeClock()
    hub = JobsHub(token=TOKEN, clock=clock.monotonic)
    hub.buckets.cas_url = servers.start(build_cas_app(hub.buckets))
    return Stand(hub, servers.start(build_jobs_hub_app(hub)), servers, clock)
