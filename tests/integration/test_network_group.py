"""A run on the private network, in the stand-in: what HF Jobs' retries do to it.

Deploy's own job specs go through the real huggingface_hub client to the Jobs stand-in, which
places each job in the run's network group; the group's DNS (``JobsHub.resolve``: the RUNNING
members claiming an alias) is the proxy's resolver; each member is a simulated replica at its
own address (loopback aliases 127.0.0.N, one port, as a group's members share port 8000). A job
the stand-in fails runs again as the same job on a new machine: a new, empty replica at a new
address.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import ClientSession, web
from huggingface_hub import HfApi

from deploy.install import Install
from deploy.plan import NETWORK_PREFIX, UPSTREAM_TOKEN_SECRET, RunPlan
from deploy.plan_jobs import proxy_spec, replica_spec
from deploy.specs import JobSpec
from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from replica_entry.sim import SIM_STATE
from tests.support.adapters import write_adapter
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.hub_jobs import JobsHub, Step, build_jobs_hub_app
from tests.support.servers import free_port, serve
from tests.support.waiting import wait_for

TOKEN = "hf_group_token"
KEY = "the-runs-replica-key"
PREFIX = "grp-r1-"  # what HF Jobs would put in $HF_NETWORK_GROUP_PREFIX
PLAN = RunPlan(run_name="r1", bucket="alice/rl", model="m", replicas=2,
               install=Install("image", None), namespace="alice")  # fmt: skip


UPSTREAM = PLAN.secret_values(TOKEN, KEY)[UPSTREAM_TOKEN_SECRET]  # what the proxy job sends


async def _launch(hub_url: str, spec: JobSpec) -> None:
    api = HfApi(endpoint=hub_url, token=TOKEN)
    kwargs = spec.run_job_kwargs(PLAN.secret_values(TOKEN, KEY), PLAN.namespace)
    await asyncio.to_thread(api.run_job, **kwargs)


def _proxy(hub: JobsHub, port: int, adapters: Path) -> web.Application:
    """The proxy a job of this run runs: ``--discover`` as planned, the group's DNS to answer."""
    spec = str(PLAN.replica_discovery).replace(f"${{{NETWORK_PREFIX}}}", PREFIX)
    spec = spec.replace(":8000", f":{port}")
    settings = Settings.model_validate(
        {"discover": spec, "discover_interval": 0.05, "adapters_dir": str(adapters),
         "watch_interval": 0.05, "upstream_token": UPSTREAM, **FAST_HEALTH}
    )  # fmt: skip

    async def group_dns(name: str, asked: int) -> list[str]:
        assert name.startswith(PREFIX)
        return hub.resolve(PLAN.run_name, name.removeprefix(PREFIX))

    app = build_app(settings, resolver=group_dns)
    return app


def _paths(sim_app: web.Application) -> list[str]:
    return [record.path for record in sim_app[SIM_STATE].records]


async def test_a_replica_job_run_again_is_found_and_warmed_before_it_serves(tmp_path: Path) -> None:
    hub = JobsHub(token=TOKEN, default_steps=(Step("RUNNING"),))
    port = free_port()
    adapters = tmp_path / ".vllm_lora"
    for version in (1, 2):
        write_adapter(adapters, f"trl-policy-v{version}")
    async with serve(build_jobs_hub_app(hub)) as hub_url:
        await _launch(hub_url, replica_spec(PLAN, 0))
        job = hub.named("r1-replica-0")
        assert job.network == {"group": "r1", "aliases": ["replica"]}
        hub.place(job.name, "127.0.0.1")
        app = _proxy(hub, port, adapters)
        pool = app[PROXY].fleet.pool
        async with serve_proxy(app) as url, ClientSession() as session:
            async with run_sim(port=port, host="127.0.0.1", api_key=KEY):
                await wait_for(lambda: [r.url for r in pool.routable()] == [f"http://127.0.0.1:{port}"],
                               what="the first run routes")  # fmt: skip
            # The machine dies: HF Jobs runs the job again (attempts 3), elsewhere, empty.
            job.fail("exit code 137")
            assert (job.runs, job.stage) == (2, "RUNNING")
            hub.place(job.name, "127.0.0.2")
            async with run_sim(port=port, host="127.0.0.2", api_key=KEY) as again:
                await wait_for(lambda: [r.url for r in pool.routable()] == [f"http://127.0.0.2:{port}"],
                               what="the second run routes, the first is gone")  # fmt: skip
                body = {"model": "trl-policy-v2", "prompt": "hello", "max_tokens": 2}
                async with session.post(f"{url}/v1/completions", json=body) as response:
                    assert response.status == 200, await response.text()
                paths = _paths(again.app)
                first_completion = paths.index("/v1/completions")
                loads = [p for p in paths[:first_completion] if "lora" in p or "adapters" in p]
                assert len(loads) >= 2, paths  # both versions of the window, before any traffic


async def test_a_proxy_job_run_again_rebuilds_its_fleet_and_window(tmp_path: Path) -> None:
    hub = JobsHub(token=TOKEN, default_steps=(Step("RUNNING"),))
    port = free_port()
    adapters = tmp_path / ".vllm_lora"
    for version in (1, 2, 3):
        write_adapter(adapters, f"trl-policy-v{version}")
    async with (
        serve(build_jobs_hub_app(hub)) as hub_url,
        run_sim(port=port, host="127.0.0.1", api_key=KEY),
        run_sim(port=port, host="127.0.0.2", api_key=KEY),
    ):
        for index in range(2):
            await _launch(hub_url, replica_spec(PLAN, index))
            hub.place(f"r1-replica-{index}", f"127.0.0.{index + 1}")
        await _launch(hub_url, proxy_spec(PLAN))
        proxy_job = hub.named("r1-proxy")
        assert proxy_job.network == {"group": "r1", "aliases": ["proxy"]}
        await _routes_and_serves(_proxy(hub, port, adapters), "trl-policy-v3")
        proxy_job.fail("exit code 137")  # HF Jobs runs the same command on a new machine
        assert proxy_job.runs == 2
        await _routes_and_serves(_proxy(hub, port, adapters), "trl-policy-v3")


async def _routes_and_serves(app: web.Application, adapter: str) -> None:
    pool = app[PROXY].fleet.pool
    async with serve_proxy(app) as url, ClientSession() as session:
        await wait_for(lambda: len(pool.routable()) == 2, what="both replicas route")
        body = {"model": adapter, "prompt": "hello", "max_tokens": 2}
        async with session.post(f"{url}/v1/completions", json=body) as response:
            assert response.status == 200, await response.text()
