"""Fixtures: the Hub stand-in (Jobs, Buckets, Xet storage) and simulated replicas served from a
background thread, a fake clock, and ``Stand.cli`` to run ``deploy.cli.main`` against them with
the real huggingface_hub client. Only the wheel's build is replaced (by ``WHEEL``'s bytes): its
upload goes through huggingface_hub and hf_xet over HTTP, as in a real run."""

from __future__ import annotations

import io
import random
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from deploy.cli import Runtime, main
from deploy.install import project_version, wheel_filename
from replica_entry.sim import Faults, SimSettings, build_sim_app
from tests.support.background import BackgroundServers
from tests.support.bearer import require_bearer
from tests.support.clock import SteppingClock as FakeClock
from tests.support.hub_buckets import build_cas_app
from tests.support.hub_jobs import JobsHub, build_jobs_hub_app

TOKEN = "hf_standin_0123456789abcdef"
WHEEL_PATH = "r1/code/" + wheel_filename(project_version("wheel"))
# Stands for the built wheel: incompressible bytes (stored as is) and text (LZ4-compressed by
# hf_xet), so an upload exercises both ways a xorb holds a chunk.
WHEEL = random.Random(17).randbytes(200_000) + b"rollout-proxy wheel contents\n" * 4_000


@pytest.fixture(autouse=True, scope="session")
def _hf_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """hf_xet's cache and logs (under ``$HF_HOME/xet``) in a temporary directory, not the
    user's home."""
    with pytest.MonkeyPatch.context() as patch:
        home = tmp_path_factory.mktemp("hf-home")
        patch.setenv("HF_HOME", str(home))
        patch.setenv("HF_XET_CACHE", str(home / "xet"))
        yield


def fake_proxy(replicas: list[dict[str, Any]]) -> web.Application:
    """A proxy's ``/health`` and ``/proxy/status`` (what ``deploy`` reads) for ``replicas``."""
    status = {
        "policy": "prefix",
        "routing": {"tracked_prefixes": 12, "templates": 1, "sticky_keys": 4},
        "inflight": 3,
        "queued": 0,
        "adapters": {
            "window": 5,
            "wanted": ["trl-policy-v7"],
            "loading": [],
            "newest": "trl-policy-v7",
        },
        "replicas": replicas,
    }
    routable = any(replica["routable"] for replica in replicas)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok" if routable else "unavailable"},
                                 status=200 if routable else 503)  # fmt: skip

    async def proxy_status(request: web.Request) -> web.Response:
        return web.json_response(status)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/proxy/status", proxy_status)
    return app


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
    built: list[Path] = field(default_factory=list)

    def replica(self, job_name: str, *, token: str = TOKEN, unhealthy: bool = False) -> str:
        """A simulated replica behind the bearer check, as ``job_name``'s exposed port."""
        app = build_sim_app(SimSettings(faults=Faults(unhealthy=unhealthy)))
        return self.exposed(job_name, app, token=token)

    def fleet(self, replicas: int, run: str = "r1") -> list[str]:
        """``replicas`` healthy replicas of run ``run``, and its trainer's sidecar proxy routing
        to all of them."""
        urls = [self.replica(f"{run}-replica-{index}") for index in range(replicas)]
        self.proxy(f"{run}-trainer", urls)
        return urls

    def proxy(self, job_name: str, urls: Collection[str], *, refused: Collection[str] = ()) -> str:
        """A proxy (its own job, or a sidecar in the trainer job) routing to ``urls`` but those
        ``refused`` (never admitted: they answer its probes 401, as the real proxy reports it),
        as ``job_name``'s exposed port."""
        replicas = [
            {
                "url": url,
                "state": "pending" if url in refused else "healthy",
                "routable": url not in refused,
                "last_error": "probe answered HTTP 401 (check --upstream-token)"
                if url in refused
                else "",
            }
            for url in urls
        ]
        return self.exposed(job_name, fake_proxy(replicas))

    def exposed(self, job_name: str, app: web.Application, *, token: str = TOKEN) -> str:
        url = self.servers.start(require_bearer(app, token))
        self.hub.expose(job_name, url)
        return url

    def build(self, root: Path, out_dir: Path, version: str) -> Path:
        """Stands for ``pip wheel``: ``WHEEL`` under the name the real build gives."""
        self.built.append(root)
        wheel = out_dir / wheel_filename(version)
        wheel.write_bytes(WHEEL)
        return wheel

    def uploaded(self, bucket: str = "alice/rl", path: str = WHEEL_PATH) -> bytes:
        return self.hub.buckets.read(bucket, path)

    def cli(self, *argv: str, token: str | None = TOKEN) -> Result:
        """``python -m deploy ARGV``; an ``up`` without trainer flags gets the one it needs."""
        if argv[:1] == ("up",) and "--" not in argv:
            argv = (*argv, *TRAINER_ARGS)
        out, err = io.StringIO(), io.StringIO()
        runtime = Runtime(clock=self.clock, token=lambda: token, build=self.build, out=out, err=err)
        code = main([*argv[:1], "--hub-endpoint", self.url, *argv[1:]], runtime)
        return Result(code, out.getvalue(), err.getvalue())


# The one trainer flag ``trainer_entry`` requires that ``deploy up`` does not write itself.
TRAINER_ARGS = ("--", "--dataset", "openai/gsm8k")


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
