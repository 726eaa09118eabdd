"""No background task dies of an exception: each logs it, counts it and carries on.

Each test makes one task's step fail (a dependency that raises, a source that answers nonsense)
and shows the task doing its job afterwards, with the failure reported."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web

from proxy.adapters.attest.check import CheckSettings, ServedPolicyCheck
from proxy.adapters.carry import Carrier, RetryPolicy
from proxy.adapters.origin import Origins
from proxy.adapters.registry import Fingerprint, Registry
from proxy.adapters.service import AdapterService
from proxy.adapters.sources import DirectorySource
from proxy.adapters.watcher import Watcher
from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import HealthSettings, Settings, UpstreamSettings
from proxy.fleet.health import HealthMonitor
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics
from proxy.runs.table import Runs
from proxy.upstream.client import UpstreamClient
from tests.support.adapters import write_adapter
from tests.support.calls import metric_value
from tests.support.clock import FakeClock
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.hub_jobs import JobsHub, Step, build_jobs_hub_app
from tests.support.servers import serve
from tests.support.waiting import wait_for


class Failures:
    def __init__(self) -> None:
        self.tasks: list[str] = []

    def __call__(self, task: str, exc: BaseException) -> None:
        self.tasks.append(task)


class FlakyAdmission:
    """Admits every replica (as ``FleetSync.admit`` does, through the pool), but raises (a
    bug) on its first ``bugs`` calls."""

    def __init__(self, pool: ReplicaPool, bugs: int) -> None:
        self.pool = pool
        self.bugs = bugs

    async def admit(self, replica: Replica) -> bool:
        if self.bugs > 0:
            self.bugs -= 1
            raise RuntimeError("a bug in admission")
        self.pool.admit(replica)
        return True

    async def refresh_info(self, replica: Replica) -> None:
        pass


async def test_the_health_loop_survives_a_failing_step() -> None:
    clock, failures = FakeClock(), Failures()
    async with run_sim() as sim:
        pool = ReplicaPool([sim.url], clock=clock)
        client = UpstreamClient(UpstreamSettings())
        monitor = HealthMonitor(
            pool, client, HealthSettings(interval_s=1.0), clock, FlakyAdmission(pool, 2), failures
        )
        task = asyncio.create_task(monitor.run())
        try:
            for _ in range(3):
                await wait_for(lambda: clock.timers, what="the loop to sleep")
                clock.advance(1.0)
            await wait_for(lambda: len(pool.routable()) == 1, what="admission after the bugs")
        finally:
            task.cancel()
            await client.close()
        assert failures.tasks == ["health", "health"]


async def test_the_watcher_survives_a_failing_change_handler(tmp_path: Path) -> None:
    clock, failures = FakeClock(), Failures()
    seen: list[str] = []

    async def on_change(added: dict[str, tuple[str, Fingerprint]], removed: list[str]) -> None:
        if added and not seen:
            seen.append("failed once")
            raise ValueError("a bug in the change handler")
        seen.extend(added)

    watcher = Watcher(DirectorySource(tmp_path, 1.0), clock, on_change, failures)
    task = asyncio.create_task(watcher.run())
    try:
        write_adapter(tmp_path, "trl-policy-v1")
        await wait_for(lambda: clock.timers, what="the first scan")
        clock.advance(1.0)
        await wait_for(lambda: failures.tasks, what="the handler's failure")
        write_adapter(tmp_path, "trl-policy-v2")
        await wait_for(lambda: clock.timers, what="the loop to sleep again")
        clock.advance(1.0)
        await wait_for(lambda: "trl-policy-v2" in seen, what="the next scan handled")
    finally:
        task.cancel()
    assert failures.tasks == ["watcher"]


async def test_discovery_survives_a_job_with_an_unusable_url() -> None:
    token = "hf_background_token"
    hub = JobsHub(token=token, default_steps=(Step("RUNNING"),))
    spec: dict[str, Any] = {
        "dockerImage": "vllm/vllm-openai",
        "command": ["serve"],
        "labels": {"rollout-replicas": "exp"},
        "expose": {"ports": [8000]},
    }
    async with serve(build_jobs_hub_app(hub)) as hub_url, run_sim() as sim:
        bad = hub.create("team", spec)
        hub.exposed[bad.name] = "http://user:pw@127.0.0.1:1"  # refused by the pool
        settings = Settings.model_validate(
            {
                "discover": "hf-jobs:rollout-replicas=exp",
                "discover_namespace": "team",
                "discover_interval": 0.05,
                "hub_endpoint": hub_url,
                "upstream_token": token,
                **FAST_HEALTH,
            }
        )
        app = build_app(settings)
        async with serve_proxy(app):
            # The bad job stays listed beside the good one: it is skipped (logged once), it
            # stops neither the good one joining nor the loop (no background error at all).
            good = hub.create("team", spec)
            hub.exposed[good.name] = sim.url
            await wait_for(
                lambda: len(app[PROXY].fleet.pool.routable()) == 1, what="the good job found"
            )
            assert [r.url for r in app[PROXY].fleet.pool] == [sim.url]
            assert discovery_errors(app) == 0


def discovery_errors(app: web.Application) -> float:
    text = app[PROXY].page.render().decode()
    return metric_value(text, 'rollout_proxy_background_errors_total{task="discovery"}')


async def test_an_adapter_task_that_fails_is_reported() -> None:
    clock, failures = FakeClock(), Failures()
    async with run_sim() as sim:
        pool = ReplicaPool([sim.url], clock=clock)
        (replica,) = tuple(pool)
        pool.admit(replica)
        client = UpstreamClient(UpstreamSettings())
        carrier = Carrier(pool, client, clock, RetryPolicy(1.0, 0.01, 0.01))
        metrics = Metrics(pool)

        class BuggyInfo(FleetInfo):
            async def refresh(self, replica: Replica) -> dict[str, str]:
                raise RuntimeError("a bug in the refresh")

        info = BuggyInfo(client, pool)
        registry = Registry(Runs())
        policy = ServedPolicyCheck(CheckSettings(), client, registry)
        service = AdapterService(
            registry, carrier, pool, info, metrics, Origins(None, None, None, False), policy,
            has_source=False, failed=failures,
        )  # fmt: skip
        try:
            service.out_of_step(replica, "trl-policy-v1")  # reconciles in the background
            await wait_for(lambda: failures.tasks, what="the reconcile task to fail")
            service.out_of_step(replica, "trl-policy-v1")  # and the next one still runs
            await wait_for(lambda: len(failures.tasks) == 2, what="a second reconcile")
        finally:
            await service.close()
            await client.close()
        assert failures.tasks == ["adapters", "adapters"]
