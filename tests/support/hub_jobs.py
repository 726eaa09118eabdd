"""A local stand-in of the Hub's Jobs and Buckets HTTP API, for the real huggingface_hub client.

It speaks the routes and JSON shapes huggingface_hub 2.4 uses (``hf_api.py``, ``_jobs_api.py``):

- ``GET /api/whoami-v2``: the token's user;
- ``POST /api/jobs/{ns}``: ``run_job``; the body is the camelCase job spec (``dockerImage``,
  ``command``, ``environment``, ``secrets``, ``flavor``, ``timeoutSeconds``, ``labels`` with the
  job's ``name``, ``volumes`` with ``mountPath``/``readOnly``, ``expose.ports``);
- ``GET /api/jobs/{ns}?label=k=v&stage=S``: ``list_jobs`` (one page, no ``Link`` header);
- ``GET /api/jobs/{ns}/{id}``: ``inspect_job``; each call moves the job one step along its
  script, then answers (so a test scripts SCHEDULING -> RUNNING -> ERROR without sleeping);
- ``POST /api/jobs/{ns}/{id}/cancel``: ``cancel_job``;
- ``GET /api/jobs/{ns}/{id}/logs?tail=N``: ``fetch_job_logs``: server-sent events
  ``data: {"timestamp": ..., "data": line}``, then the stream ends;
- ``POST /api/buckets/{ns}/{name}``: ``create_bucket``; an existing bucket answers 409 with its
  ``url``, as the Hub does for repos (the client reads ``url`` even then);
- ``GET /api/buckets/{ns}/{name}``: ``bucket_info``.

Every route needs ``Authorization: Bearer <token>``. A RUNNING job with exposed ports lists
``status.exposeUrls``: the URL a test registered with ``JobsHub.expose`` (an app on loopback,
guarded by ``require_bearer`` as the HF jobs proxy guards ``https://<id>--8000.hf.jobs``), else
the Hub's form. ``BackgroundServers`` runs apps on a loop in a thread, for synchronous tests of a
blocking client.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import secrets
import threading
from collections.abc import Coroutine, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

from tests.support.servers import serve

TERMINAL = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})
T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    stage: str
    message: str | None = None


@dataclass
class StandInJob:
    """One job as created: its full spec, where it is in its script, and its log lines."""

    id: str
    namespace: str
    spec: dict[str, Any]
    steps: list[Step]
    logs: list[str]
    created_at: datetime.datetime
    position: int = 0

    @property
    def stage(self) -> str:
        return self.steps[self.position].stage

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.spec.get("labels") or {})

    @property
    def name(self) -> str:
        return self.labels.get("name", self.id)

    @property
    def ports(self) -> list[int]:
        return list((self.spec.get("expose") or {}).get("ports") or [])

    def advance(self) -> None:
        if self.position + 1 < len(self.steps):
            self.position += 1

    def move_to(self, stage: str, message: str | None = None) -> None:
        """Leave the script: ``stage`` from now on."""
        self.steps = [*self.steps[: self.position + 1], Step(stage, message)]
        self.position = len(self.steps) - 1


@dataclass
class JobsHub:
    """The stand-in's state; tests read it and steer it between client calls."""

    token: str
    user: str = "alice"
    default_steps: tuple[Step, ...] = (Step("SCHEDULING"), Step("RUNNING"))
    jobs: dict[str, StandInJob] = field(default_factory=dict)
    buckets: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    exposed: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, tuple[list[Step], list[str]]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def script(self, job_name: str, *stages: str | Step, logs: Sequence[str] = ()) -> None:
        """The stages the job named ``job_name`` will go through, one per ``inspect_job``."""
        steps = [stage if isinstance(stage, Step) else Step(stage) for stage in stages]
        self.scripts[job_name] = (steps, list(logs))

    def expose(self, job_name: str, url: str) -> None:
        """Where the exposed port of ``job_name`` lands once it runs."""
        self.exposed[job_name] = url

    def named(self, name: str) -> StandInJob:
        (job,) = (job for job in self.jobs.values() if job.name == name)
        return job

    def create(self, namespace: str, spec: dict[str, Any]) -> StandInJob:
        name = (spec.get("labels") or {}).get("name", "")
        steps, logs = self.scripts.get(name, (list(self.default_steps), [f"{name} starting"]))
        job_id = f"{0x6650_0000 + next(self._ids):024x}"
        job = StandInJob(
            job_id, namespace, spec, list(steps), logs, datetime.datetime.now(datetime.UTC)
        )
        self.jobs[job_id] = job
        return job

    def describe(self, job: StandInJob) -> dict[str, Any]:
        """The job as the Hub's JSON answers it."""
        spec = job.spec
        step = job.steps[job.position]
        urls = None
        if job.stage == "RUNNING" and job.ports:
            urls = [
                self.exposed.get(job.name, f"https://{job.id}--{port}.hf.jobs")
                for port in job.ports
            ]
        return {
            "id": job.id,
            "createdAt": _iso(job.created_at),
            "dockerImage": spec.get("dockerImage"),
            "spaceId": spec.get("spaceId"),
            "command": spec.get("command"),
            "arguments": spec.get("arguments", []),
            "environment": spec.get("environment", {}),
            "secrets": dict.fromkeys(spec.get("secrets") or {}),
            "flavor": spec.get("flavor"),
            "labels": spec.get("labels"),
            "volumes": spec.get("volumes"),
            "expose": spec.get("expose"),
            "status": {"stage": step.stage, "message": step.message, "exposeUrls": urls},
            "owner": {"id": f"id-{job.namespace}", "name": job.namespace, "type": "user"},
        }


JOBS_HUB = web.AppKey("jobs_hub", JobsHub)


def build_jobs_hub_app(hub: JobsHub) -> web.Application:
    app = web.Application(middlewares=[_require_hub_token])
    app[JOBS_HUB] = hub
    add = app.router
    add.add_get("/api/whoami-v2", _whoami)
    add.add_post("/api/jobs/{ns}", _run_job)
    add.add_get("/api/jobs/{ns}", _list_jobs)
    add.add_get("/api/jobs/{ns}/{id}", _inspect_job)
    add.add_post("/api/jobs/{ns}/{id}/cancel", _cancel_job)
    add.add_get("/api/jobs/{ns}/{id}/logs", _job_logs)
    add.add_post("/api/buckets/{ns}/{name}", _create_bucket)
    add.add_get("/api/buckets/{ns}/{name}", _bucket_info)
    return app


def require_bearer(app: web.Application, token: str) -> web.Application:
    """Put HF's jobs-proxy check in front of ``app``: ``Authorization: Bearer <token>`` or 401."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not _bearer_matches(request, token):
            return web.json_response(
                {"error": "Invalid credentials in Authorization header"}, status=401
            )
        return await handler(request)

    app.middlewares.insert(0, guard)
    return app


def _bearer_matches(request: web.Request, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.encode(), token.encode())


@web.middleware
async def _require_hub_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not _bearer_matches(request, request.app[JOBS_HUB].token):
        return web.json_response(
            {"error": "Invalid credentials in Authorization header"}, status=401
        )
    return await handler(request)


def _iso(moment: datetime.datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _endpoint(request: web.Request) -> str:
    return str(request.url.origin())


def _job(request: web.Request) -> StandInJob:
    job = request.app[JOBS_HUB].jobs.get(request.match_info["id"])
    if job is None or job.namespace != request.match_info["ns"]:
        raise web.HTTPNotFound(
            text=json.dumps({"error": "Job not found"}), content_type="application/json"
        )
    return job


async def _whoami(request: web.Request) -> web.Response:
    hub = request.app[JOBS_HUB]
    return web.json_response({"type": "user", "id": f"id-{hub.user}", "name": hub.user, "orgs": []})


async def _run_job(request: web.Request) -> web.Response:
    hub = request.app[JOBS_HUB]
    job = hub.create(request.match_info["ns"], await request.json())
    return web.json_response(hub.describe(job))


async def _list_jobs(request: web.Request) -> web.Response:
    hub = request.app[JOBS_HUB]
    wanted_labels = [value.split("=", 1) for value in request.query.getall("label", [])]
    wanted_stages = set(request.query.getall("stage", []))
    found = [
        hub.describe(job)
        for job in hub.jobs.values()
        if job.namespace == request.match_info["ns"]
        and all(job.labels.get(key) == value for key, value in wanted_labels)
        and (not wanted_stages or job.stage in wanted_stages)
    ]
    return web.json_response(found)


async def _inspect_job(request: web.Request) -> web.Response:
    job = _job(request)
    job.advance()
    return web.json_response(request.app[JOBS_HUB].describe(job))


async def _cancel_job(request: web.Request) -> web.Response:
    job = _job(request)
    if job.stage not in TERMINAL:
        job.move_to("CANCELED")
    request.app[JOBS_HUB].cancelled.append(job.id)
    return web.json_response({})


async def _job_logs(request: web.Request) -> web.Response:
    job = _job(request)
    lines = job.logs
    if "tail" in request.query:
        lines = lines[-int(request.query["tail"]) :]
    stamp = _iso(job.created_at)
    events = ["===== Job started =====", *lines]
    body = "".join(f"data: {json.dumps({'timestamp': stamp, 'data': line})}\n\n" for line in events)
    return web.Response(text=body, content_type="text/event-stream")


async def _create_bucket(request: web.Request) -> web.Response:
    hub = request.app[JOBS_HUB]
    bucket_id = f"{request.match_info['ns']}/{request.match_info['name']}"
    url = f"{_endpoint(request)}/buckets/{bucket_id}"
    if bucket_id in hub.buckets:
        return web.json_response(
            {"error": "You already created this bucket", "url": url}, status=409
        )
    body = await request.json() if request.can_read_body else {}
    hub.buckets[bucket_id] = {
        "private": body.get("visibility") == "private",
        "createdAt": _iso(datetime.datetime.now(datetime.UTC)),
    }
    return web.json_response({"url": url, "name": bucket_id, "id": bucket_id})


async def _bucket_info(request: web.Request) -> web.Response:
    hub = request.app[JOBS_HUB]
    bucket_id = f"{request.match_info['ns']}/{request.match_info['name']}"
    if bucket_id not in hub.buckets:
        return web.json_response(
            {"error": "Bucket not found"}, status=404, headers={"X-Error-Code": "RepoNotFound"}
        )
    info = hub.buckets[bucket_id]
    return web.json_response(
        {
            "id": bucket_id,
            "private": info["private"],
            "createdAt": info["createdAt"],
            "size": 0,
            "totalFiles": 0,
        }
    )


class BackgroundServers:
    """Serve aiohttp apps on loopback from an event loop in a daemon thread.

    ``start(app)`` returns the app's base URL; ``close()`` cleans every app up and stops the loop.
    ``call(coro)`` runs a coroutine on that loop (to touch app state from a test thread).
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="servers", daemon=True)
        self._thread.start()
        self._exits = AsyncExitStack()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def start(self, app: web.Application) -> str:
        async def enter() -> str:
            return await self._exits.enter_async_context(serve(app))

        return self.call(enter())

    def close(self) -> None:
        try:
            self.call(self._exits.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
