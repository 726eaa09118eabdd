"""Discovery through the real huggingface_hub client against a local stand-in of the Jobs API."""

from __future__ import annotations

from aiohttp import ClientSession

from proxy.app import DISCOVERY, POOL, build_app
from proxy.app import serve as serve_proxy
from proxy.clock import RealClock
from proxy.config import Settings, parse_discover_spec
from proxy.fleet.discovery import Discovery
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


def jobs_discovery(hub_url: str, namespace: str) -> Settings:
    """A proxy finding run exp1's replica jobs in ``namespace`` through the stand-in."""
    return Settings.model_validate(
        {
            "discover": "hf-jobs:rollout-replicas=exp1",
            "discover_namespace": namespace,
            "discover_interval": 0.05,
            "hub_endpoint": hub_url,
            "upstream_token": TOKEN,
            **FAST_HEALTH,
        }
    )


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
        app = build_app(jobs_discovery(hub_url, "team"))
        pool = app[POOL]
        async with serve_proxy(app):
            await wait_for(lambda: [r.id for r in pool.routable()] == [a.id], what="a discovered")
            second = hub.create("team", replica_spec("exp1"))
            hub.exposed[second.name] = b.url
            await wait_for(lambda: len(pool.routable()) == 2, what="b discovered")
            first.move_to("CANCELED")
            await wait_for(lambda: [r.id for r in pool] == [b.id], what="a removed")


async def test_a_name_resolved_for_real_gives_its_replicas() -> None:
    """``dns:localhost:PORT`` through the event loop's resolver: 127.0.0.1 serves there."""
    async with run_sim() as replica:
        port = int(replica.url.rsplit(":", 1)[1])
        settings = Settings.model_validate(
            {"discover": f"dns:localhost:{port}", "discover_interval": 0.05, **FAST_HEALTH}
        )
        app = build_app(settings)
        async with serve_proxy(app):
            await wait_for(
                lambda: f"http://127.0.0.1:{port}" in [r.url for r in app[POOL].routable()],
                what="localhost's replica routes",
            )


async def test_an_address_that_does_not_answer_never_routes_while_the_others_serve() -> None:
    """A network group's alias listing a member that is not serving (yet, or any more): real
    sockets at both addresses, the name's records given by the test."""
    async with run_sim() as replica:
        port = int(replica.url.rsplit(":", 1)[1])

        async def records(name: str, asked_port: int) -> list[str]:
            assert (name, asked_port) == ("rollout-replica", port)
            return ["127.0.0.1", "127.0.0.2"]  # nothing listens on 127.0.0.2

        spec = f"dns:rollout-replica:{port}"
        settings = Settings.model_validate(
            {"discover": spec, "discover_interval": 0.05, **FAST_HEALTH}
        )
        app = build_app(settings)
        pool = app[POOL]
        app[DISCOVERY] = Discovery(
            parse_discover_spec(spec),
            pool,
            RealClock(),
            failed=lambda *_: None,
            interval_s=0.05,
            resolver=records,
        )
        async with serve_proxy(app) as url:
            await wait_for(
                lambda: [r.url for r in pool.routable()] == [f"http://127.0.0.1:{port}"],
                what="the address that answers routes",
            )
            assert {r.url for r in pool} == {f"http://127.0.0.{n}:{port}" for n in (1, 2)}
            body = {"model": "sim-model", "prompt": "hello", "max_tokens": 2}
            async with (
                ClientSession() as session,
                session.post(f"{url}/v1/completions", json=body) as response,
            ):
                assert response.status == 200, await response.text()
            silent = pool.get(f"127.0.0.2:{port}")
            assert silent is not None and not silent.routable
