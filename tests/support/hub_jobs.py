"""A local stand-in of the Hub's Jobs API (and, through ``hub_buckets``, its Buckets API).

It answers as the real service does for the calls huggingface_hub 2.1.1 to 2.4 makes
(``hf_api.py``, ``_jobs_api.py``, ``utils/_pagination.py``), checked against the client's code;
the wire format (a job's JSON, the spec checks, paging, the log events, the bearer check) is
``deploy.rehearsal.hub_wire``'s, which the rehearsal's bridge answers with too:

- ``GET /api/whoami-v2``: the token's user;
- every job names its ``owner`` (the namespace: a ``user``, or an ``org`` whose members may all
  start jobs there) and its ``initiator`` (the user who started it: ``JobsHub.create``'s, by
  default the token's user), as ``JobInfo.owner`` and ``JobInfo.initiator`` read them;
- ``POST /api/jobs/{ns}``: ``run_job``; the body is the camelCase job spec (``dockerImage``,
  ``command``, ``environment``, ``secrets``, ``flavor``, ``timeoutSeconds``, ``labels`` with the
  job's ``name``, ``volumes`` with ``mountPath``/``readOnly``, ``expose.ports``); the answer
  already lists ``status.exposeUrls`` (``hf jobs run`` prints them from it);
- ``GET /api/jobs/{ns}?label=k=v&stage=S``: ``list_jobs``, ``page_size`` jobs per page, the next
  page linked by a ``Link: <url>; rel="next"`` header (the client's ``paginate`` follows it);
- ``GET /api/jobs/{ns}/{id}``: ``inspect_job``; a job's stage moves with TIME, not with calls:
  its script says how long each stage lasts on the hub's clock (a test passes its fake clock);
- ``POST /api/jobs/{ns}/{id}/cancel``: ``cancel_job`` (403 for a job in ``uncancellable``);
  each of ``JobsHub.on_cancel`` is awaited before the answer (what happens elsewhere while a
  cancel is under way: the scaler's launch racing ``deploy down``);
- retries: a spec's ``attempts`` (huggingface_hub 2.1.1+) is answered as ``retry`` (the runs
  the service may add, ``attempts - 1``: the client's ``JobInfo.retry``); a job that fails
  (``JobsHub.fail``) with runs left runs again as the same job, its script from the start;
- network groups: a spec's ``network`` (``{"group": G, "aliases": [...]}``, huggingface_hub
  1.32+) is checked as the client documents it (lowercase alphanumerics and dashes, group 46 and
  alias 34 characters, aliases unique, none without a group: else 400) and answered back as the
  job's ``network`` (the client's ``JobInfo.network``); ``JobsHub.resolve`` is the group's DNS:
  ``${HF_NETWORK_GROUP_PREFIX}<alias>`` -> the addresses (``JobsHub.place``) of the RUNNING
  members claiming the alias;
- ``GET /api/jobs/{ns}/{id}/logs?tail=N``: ``fetch_job_logs``: server-sent events
  ``data: {"timestamp": ..., "data": line}``, starting with ``===== Job started ... =====``;
  the stream stays open while the job has not ended (lines logged meanwhile are sent, with a
  ``: keep-alive`` comment every ``keepalive_s``) and closes once it has;
- the Buckets routes and the Xet storage: see ``tests.support.hub_buckets``.

Every route needs ``Authorization: Bearer <token>``. A job with exposed ports lists the URL a
test registered with ``JobsHub.expose`` (an app on loopback, guarded by
``bearer.require_bearer`` as the HF jobs proxy guards ``https://<id>--8000.hf.jobs``), else the
Hub's form.
"""

from __future__ import annotations

import datetime
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from deploy.jobs import TERMINAL_STAGES
from deploy.rehearsal.hub_wire import (
    bearer_matches,
    error,
    exposed_urls,
    job_answer,
    log_stream,
    page,
    refused,
    spec_refusal,
    wanted,
)
from tests.support.hub_buckets import Buckets, add_bucket_routes

STREAM_TICK_S = 0.02  # how often an open log stream looks for new lines or the job's end
Clock = Callable[[], float]


@dataclass(frozen=True)
class Step:
    """A stage of a job's script, lasting ``seconds`` of hub time (the last one lasts)."""

    stage: str
    message: str | None = None
    seconds: float | None = None


@dataclass
class StandInJob:
    """One job as created: its full spec, its script (from ``began``, hub time), its log lines."""

    id: str
    namespace: str
    spec: dict[str, Any]
    steps: list[Step]
    lines: list[tuple[datetime.datetime, str]]
    created_at: datetime.datetime
    clock: Clock
    began: float
    script: tuple[Step, ...] = ()
    runs: int = 1
    initiator: str = "alice"  # the user who started it (in an org namespace, any member)

    @property
    def attempts(self) -> int:
        return int(self.spec.get("attempts") or 1)

    @property
    def step(self) -> Step:
        elapsed = self.clock() - self.began
        for step in self.steps:
            if step.seconds is None or elapsed < step.seconds:
                return step
            elapsed -= step.seconds
        return self.steps[-1]

    @property
    def stage(self) -> str:
        return self.step.stage

    @property
    def terminal(self) -> bool:
        return self.stage in TERMINAL_STAGES

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.spec.get("labels") or {})

    @property
    def name(self) -> str:
        return self.labels.get("name", self.id)

    @property
    def network(self) -> dict[str, Any] | None:
        network = self.spec.get("network")
        return dict(network) if network else None

    @property
    def ports(self) -> list[int]:
        return list((self.spec.get("expose") or {}).get("ports") or [])

    def move_to(self, stage: str, message: str | None = None) -> None:
        """Leave the script: ``stage`` from now on."""
        self.steps = [Step(stage, message)]
        self.began = self.clock()

    def fail(self, message: str) -> None:
        """The job's run fails now: it runs again from its script's start while it has runs
        left (``attempts``), else it ends in ERROR."""
        if self.runs >= self.attempts:
            self.move_to("ERROR", message)
            return
        self.runs += 1
        self.log(f"{message}: run {self.runs} of {self.attempts}")
        self.steps, self.began = list(self.script), self.clock()

    def log(self, line: str) -> None:
        """The job prints ``line`` now (an open log stream sends it)."""
        self.lines.append((datetime.datetime.now(datetime.UTC), line))


@dataclass
class JobsHub:
    """The stand-in's state; tests read it and steer it between client calls."""

    token: str
    user: str = "alice"
    clock: Clock = time.monotonic
    default_steps: tuple[Step, ...] = (Step("SCHEDULING", seconds=5.0), Step("RUNNING"))
    page_size: int = 50
    keepalive_s: float = 30.0
    jobs: dict[str, StandInJob] = field(default_factory=dict)
    buckets: Buckets = field(default_factory=Buckets)
    cancelled: list[str] = field(default_factory=list)
    uncancellable: set[str] = field(default_factory=set)  # job ids whose cancel answers 403
    exposed: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # job name -> its group address
    on_cancel: list[Callable[[StandInJob], Awaitable[None]]] = field(default_factory=list)
    scripts: dict[str, tuple[list[Step], list[str]]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def script(self, job_name: str, *stages: str | Step, logs: Sequence[str] = ()) -> None:
        """The stages the job named ``job_name`` will go through: each ``Step`` lasts its
        ``seconds``; a bare stage name lasts 5 s (the last one, for ever)."""
        steps = [stage if isinstance(stage, Step) else Step(stage, seconds=5.0) for stage in stages]
        if steps:
            steps[-1] = Step(steps[-1].stage, steps[-1].message)
        self.scripts[job_name] = (steps, list(logs))

    def expose(self, job_name: str, url: str) -> None:
        """Where the exposed port of ``job_name`` lands."""
        self.exposed[job_name] = url

    def place(self, job_name: str, address: str) -> None:
        """The address ``job_name`` has inside its network group (e.g. a loopback alias)."""
        self.addresses[job_name] = address

    def resolve(self, group: str, alias: str) -> list[str]:
        """What ``${HF_NETWORK_GROUP_PREFIX}<alias>`` resolves to inside ``group``: the placed
        addresses of its RUNNING members claiming ``alias``."""
        return [
            self.addresses[job.name]
            for job in self.jobs.values()
            if job.network is not None
            and job.network.get("group") == group
            and alias in (job.network.get("aliases") or [])
            and job.stage == "RUNNING"
            and job.name in self.addresses
        ]

    def named(self, name: str) -> StandInJob:
        (job,) = (job for job in self.jobs.values() if job.name == name)
        return job

    def create(
        self, namespace: str, spec: dict[str, Any], initiator: str | None = None
    ) -> StandInJob:
        name = (spec.get("labels") or {}).get("name", "")
        steps, logs = self.scripts.get(name, (list(self.default_steps), [f"{name} starting"]))
        job_id = f"{0x6650_0000 + next(self._ids):024x}"
        now = datetime.datetime.now(datetime.UTC)
        job = StandInJob(
            job_id,
            namespace,
            spec,
            list(steps),
            [(now, line) for line in logs],
            now,
            self.clock,
            self.clock(),
            tuple(steps),
            initiator=initiator or self.user,
        )
        self.jobs[job_id] = job
        return job

    def describe(self, job: StandInJob) -> dict[str, Any]:
        """The job as the Hub's JSON answers it."""
        step = job.step
        urls = exposed_urls(job.id, job.spec)
        if job.name in self.exposed:
            urls = [self.exposed[job.name] for _ in urls]
        return job_answer(
            job_id=job.id, namespace=job.namespace, initiator=job.initiator, spec=job.spec,
            stage=step.stage, message=step.message, created_at=job.created_at, expose_urls=urls,
        )  # fmt: skip


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
    add_bucket_routes(app, hub.buckets)
    return app


@web.middleware
async def _require_hub_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not bearer_matches(request, request.app[JOBS_HUB].token):
        return refused()
    return await handler(request)


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
    spec = await request.json()
    refusal = spec_refusal(spec)
    if refusal is not None:
        return error(400, refusal)
    job = hub.create(request.match_info["ns"], spec)
    return web.json_response(hub.describe(job))


async def _list_jobs(request: web.Request) -> web.Response:
    hub = request.app[JOBS_HUB]
    found = [
        job
        for job in hub.jobs.values()
        if job.namespace == request.match_info["ns"] and wanted(request, job.labels, job.stage)
    ]
    jobs, headers = page(found, request, hub.page_size)
    return web.json_response([hub.describe(job) for job in jobs], headers=headers)


async def _inspect_job(request: web.Request) -> web.Response:
    return web.json_response(request.app[JOBS_HUB].describe(_job(request)))


async def _cancel_job(request: web.Request) -> web.Response:
    job = _job(request)
    if job.id in request.app[JOBS_HUB].uncancellable:
        return error(403, "You cannot cancel this job")
    if not job.terminal:
        job.move_to("CANCELED")
    request.app[JOBS_HUB].cancelled.append(job.id)
    for hook in request.app[JOBS_HUB].on_cancel:
        await hook(job)
    return web.json_response({})


async def _job_logs(request: web.Request) -> web.StreamResponse:
    hub = request.app[JOBS_HUB]
    job = _job(request)
    return await log_stream(
        request, created_at=job.created_at, lines=lambda: job.lines, ended=lambda: job.terminal,
        keepalive_s=hub.keepalive_s, clock=hub.clock, tick_s=STREAM_TICK_S,
    )  # fmt: skip
