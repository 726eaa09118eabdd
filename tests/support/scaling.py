"""A run whose fleet sizes itself, on loopback: the Jobs stand-in (``hub_jobs``) reached through
the real huggingface_hub client, the real proxy finding the replicas by the group's alias (the
stand-in's DNS), and a simulated replica for each replica job that runs (its own loopback
address, 127.0.0.<index + 1>, one port, as a group's members share port 8000).

The scaler under test is the product's (``deploy.scaler.actuator.Scaler``), built from the
plan's own configuration (``deploy.plan_jobs.scaler_config``); only its clock (``Wall``: the
epoch seconds a test moves), the trainer's figures (``Waits``) and, where a test says so, its
decider are stand-ins. A pass runs in a worker thread (the Hub client blocks); after each one the
replica jobs it launched start their simulated replica, unless a test names a job that never
becomes ready (``never_ready``), and the jobs that ended stop theirs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web
from huggingface_hub import HfApi

from deploy.install import Install
from deploy.jobs import HubJobs
from deploy.plan import RunPlan
from deploy.plan_jobs import replica_spec, scaler_config
from deploy.scaler.actuator import Decider, Measured, Scaler, Store
from deploy.scaler.config import Scaling
from deploy.scaler.decide import Decision, decide
from deploy.scaler.proxy_calls import ProxyCalls
from deploy.specs import INDEX_LABEL, ROLE_LABEL, SCALED_LABEL
from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from proxy.fleet.pool import ReplicaPool
from tests.support.fleet import FAST_HEALTH, Sim, run_sim
from tests.support.hub_jobs import JobsHub, StandInJob, Step, build_jobs_hub_app
from tests.support.servers import free_port, serve
from tests.support.waiting import wait_for

TOKEN = "hf_scaler_standin_token"
REPLICA_KEY = "the-runs-replica-key"
ADMIN_KEY = "the-proxys-admin-key"
PREFIX = "grp-r1-"  # what HF Jobs would put in $HF_NETWORK_GROUP_PREFIX
NAMESPACE = "alice"


def plan(scaling: Scaling, start: int | None = None) -> RunPlan:
    """Run ``r1`` starting with ``start`` replicas (default: the range's minimum)."""
    return RunPlan(
        run_name="r1", bucket="alice/rl", model="m", install=Install("image", None),
        replicas=scaling.min_replicas if start is None else start, namespace=NAMESPACE,
        scale=scaling,
    )  # fmt: skip


class Wall:
    """The scaler's clock: seconds since the epoch (near the stand-in's creation times), moved
    only by ``advance``."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Waits:
    """The trainer's figures as a test sets them."""

    waited: float = 0.0
    remaining_s: float | None = None

    def measure(self, now: float) -> Measured:
        return Measured(self.waited, self.remaining_s)


def scripted(*actions: tuple[str, int]) -> Decider:
    """A decider saying ``actions`` in turn, one a call (then hold), whatever the fleet; it
    keeps no account of launches or cooldowns (the guard must)."""
    said = iter(actions)

    def decider(window: Any, history: Any, bounds: Any, policy: Any) -> Decision:
        action, count = next(said, ("hold", 0))
        return Decision(action, f"scripted {action}", history, count)  # type: ignore[arg-type]

    return decider


def address(index: int) -> str:
    return f"127.0.0.{index + 1}"


@dataclass
class Run:
    hub: JobsHub
    hub_url: str
    proxy_url: str
    app: web.Application
    port: int
    plan: RunPlan
    exits: AsyncExitStack
    wall: Wall = field(default_factory=Wall)
    sims: dict[str, Sim] = field(default_factory=dict)
    never_ready: set[str] = field(default_factory=set)

    @property
    def pool(self) -> ReplicaPool:
        return self.app[PROXY].fleet.pool

    def replica_jobs(self, *, live: bool = True) -> list[StandInJob]:
        jobs = [job for job in self.hub.jobs.values() if job.labels.get(ROLE_LABEL) == "replica"]
        return [job for job in jobs if not (live and job.terminal)]

    def group_dns(self, name: str) -> list[str]:
        assert name.startswith(PREFIX), name
        return self.hub.resolve(self.plan.run_name, name.removeprefix(PREFIX))

    def scaler(
        self,
        decider: Decider = decide,
        waits: Waits | None = None,
        store: Store | None = None,
        drain_timeout_s: float | None = None,
        **config: Any,
    ) -> Scaler:
        made = replace(scaler_config(self.plan), port=self.port, **config)
        if drain_timeout_s is not None:
            made = replace(made, scaling=replace(made.scaling, drain_timeout_s=drain_timeout_s))
        api = HfApi(endpoint=self.hub_url, token=TOKEN)
        secrets = self.plan.secret_values(TOKEN, REPLICA_KEY)
        return Scaler(
            made, HubJobs(api, NAMESPACE), ProxyCalls(self.proxy_url, ADMIN_KEY),
            waits or Waits(), secrets=secrets, resolve=self.group_dns, prefix=PREFIX,
            clock=self.wall, decider=decider, store=store,
        )  # fmt: skip

    async def launch_initial(self) -> None:
        """The replicas ``deploy up`` launches, routed before the run starts."""
        api = HfApi(endpoint=self.hub_url, token=TOKEN)
        for index in range(self.plan.replicas):
            spec = replica_spec(self.plan, index)
            kwargs = spec.run_job_kwargs(self.plan.secret_values(TOKEN, REPLICA_KEY), NAMESPACE)
            await asyncio.to_thread(api.run_job, **kwargs)
        await self.jobs_run()
        await self.routed(self.plan.replicas)

    async def tick(self, scaler: Scaler) -> Decision | None:
        """One pass of the scaler, then the jobs it launched or ended start or stop."""
        decision = await asyncio.to_thread(scaler.tick)
        await self.jobs_run()
        return decision

    async def jobs_run(self) -> None:
        """A simulated replica for each running replica job (but ``never_ready``), none for
        the ended ones."""
        for job in self.replica_jobs(live=False):
            sim = self.sims.get(job.name)
            if job.terminal and sim is not None:
                await sim.stop()
                del self.sims[job.name]
            elif not job.terminal and sim is None and job.name not in self.never_ready:
                where = address(int(job.labels[INDEX_LABEL]))
                self.hub.place(job.name, where)
                self.sims[job.name] = await self.exits.enter_async_context(
                    run_sim(port=self.port, host=where, api_key=REPLICA_KEY)
                )

    def scaled(self) -> list[StandInJob]:
        """Every replica job the scaler launched, ended ones too, in launch order."""
        return [job for job in self.replica_jobs(live=False) if SCALED_LABEL in job.labels]

    async def routed(self, count: int) -> None:
        await wait_for(lambda: len(self.pool.routable()) == count, timeout=10.0,
                       what=f"{count} replica(s) routed")  # fmt: skip


@asynccontextmanager
async def scaling_run(scaling: Scaling, start: int | None = None) -> AsyncIterator[Run]:
    """A run of ``scaling`` with its first replicas routed (module docstring)."""
    hub = JobsHub(token=TOKEN, default_steps=(Step("RUNNING"),))
    port = free_port()
    the_plan = plan(scaling, start)
    async with AsyncExitStack() as exits:
        hub_url = await exits.enter_async_context(serve(build_jobs_hub_app(hub)))

        async def group_dns(name: str, asked: int) -> list[str]:
            assert name.startswith(PREFIX), name
            return hub.resolve(the_plan.run_name, name.removeprefix(PREFIX))

        settings = Settings.model_validate(
            {"discover": f"dns:{PREFIX}replica:{port}", "discover_interval": 0.05,
             "admin_key": ADMIN_KEY, "upstream_token": REPLICA_KEY, **FAST_HEALTH}
        )  # fmt: skip
        app = build_app(settings, resolver=group_dns)
        proxy_url = await exits.enter_async_context(serve_proxy(app))
        run = Run(hub, hub_url, proxy_url, app, port, the_plan, exits)
        await run.launch_initial()
        yield run
