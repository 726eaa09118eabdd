"""Discovery through the real huggingface_hub client against a local stand-in of the Jobs API."""

from __future__ import annotations

from proxy.app import POOL, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.hub_jobs import JobsHub, Step, build_jobs_hub_app
from tests.support.servers import serve
from tests.support.waiting import wait_for

TOKEN = "hf_discovery_token"


def replica_spec(run: str) -> dict[str, object]:
    return {
        "dockerImage": "vllm/vllm-openai",
        "command": ["serve"],
        "labels": {"rollout-replicas": run},
        "expose": {"ports": [8000]},
    }


async def test_replicas_join_and_leave_with_their_jobs() -> None:
    hub = JobsHub(token=TOKEN, default_steps=(Step("RUNNING"),))
    async with (
        serve(build_jobs_hub_app(hub)) as hub_url,
        run_sim() as a,
        run_sim() as b,
    ):
        first = hub.create("team", replica_spec("exp1"))
        hub.exposed[first.name] = a.url
        other_run = hub.create("team", {**replica_spec("exp2")})
        hub.exposed[other_run.name] = b.url
        settings = Settings.model_validate(
            {
                "discover": "hf-jobs:rollout-replicas=exp1",
                "discover_namespace": "team",
                "discover_interval": 0.05,
                "hub_endpoint": hub_url,
                "upstream_token": TOKEN,
                **FAST_HEALTH,
            }
        )
        app = build_app(settings)
        pool = app[POOL]
        async with serve_proxy(app):
            await wait_for(lambda: [r.id for r in pool.routable()] == [a.id], what="a discovered")
            second = hub.create("team", replica_spec("exp1"))
            hub.exposed[second.name] = b.url
            await wait_for(lambda: len(pool.routable()) == 2, what="b discovered")
            first.move_to("CANCELED")
            await wait_for(lambda: [r.id for r in pool] == [b.id], what="a removed")
