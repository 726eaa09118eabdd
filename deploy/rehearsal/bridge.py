"""The rehearsal's bridge: the Hub's Jobs API served to the rehearsal's jobs, backed by the
rehearsal's own job starter and network group.

Every job of the rehearsal finds it at ``$HF_ENDPOINT`` (``http://<the group's gateway>:<port>``:
on the group's bridge, which only the rehearsal's jobs and this machine reach) and calls it with
the real huggingface_hub client and the token the rehearsal gave it as its ``HF_TOKEN`` secret
(``Authorization: Bearer``, as the Hub checks it): ``whoami``, ``run_job``, ``list_jobs`` (by
label and stage, paged), ``inspect_job``, ``cancel_job``, ``fetch_job_logs``. It answers as the
Hub does (``hub_wire``, the format the tests' stand-in answers with too) for the one namespace
the plan runs in (whoami's user). The plan's own jobs are listed with their labels (``Book``), so
a job finds and adopts its siblings. A ``run_job`` is started by the rehearsal (``Runner``: its
command in a namespace of its own, joined to the group under its aliases, the bucket mounted as
its volume says, its secrets as variables) in a worker thread, while the answer says SCHEDULING;
its stages follow what the rehearsal sees (``bridge_jobs``). ``cancel_job`` answers at once and
the job is CANCELED; then its processes get SIGTERM, SIGKILL after the rehearsal's grace, and
it leaves the group's DNS; a job started through the bridge that ends by itself leaves too.

A request for anything but the Jobs API (a model download, say) answers 404, and the bridge says
it in the rehearsal's output: nothing is downloaded in a rehearsal, and nothing tries unnoticed.
Two other routes are answered as the Hub answers them, with no token (the client sends none):
``/api/agent-harnesses``, which huggingface_hub 2.4 asks once a day per home folder for the AI
agent harnesses it knows (for its user agent; none here), and ``HEAD /api/telemetry/...``, the
pings libraries send through it (TRL's, when a trainer starts): taken, and dropped.

Bounds: ``MAX_API_JOBS`` jobs started through it per rehearsal (then 429), ``MAX_BODY_BYTES`` per
request (413), ``MAX_STREAMS`` log streams at once (429), each at most ``STREAM_MAX_S`` (the
client asks again while the job runs), ``WORKERS`` starts and stops at once, ``MAX_SAID`` refusals
said (then counted). Every handler's failure answers 500 in one line and is said; the watcher
(stopping cancelled and ended jobs) survives its own exceptions; nothing here can end the
rehearsal. The token is compared, never logged or answered; a spec's secrets reach only the
started job's environment (answers name them with no value).

Not as the Hub does: one namespace and one network group (the plan's); a job's ``timeout`` and
``flavor`` are recorded, not enforced (the rehearsal's own deadlines bound every job); a failed job
is not run again whatever its ``attempts``; exposed URLs are the Hub's form, not served (the
rehearsal runs the private network); no Spaces, no SSH, no metrics stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from json import JSONDecodeError
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler

from deploy.rehearsal.bridge_jobs import Book, BridgeJob
from deploy.rehearsal.bridge_specs import Refused, job_spec
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
from deploy.rehearsal.jobs import LocalJob
from deploy.specs import JobSpec

MAX_API_JOBS = 16
MAX_BODY_BYTES = 256 * 1024
MAX_STREAMS = 16
STREAM_MAX_S = 300.0
STREAM_TICK_S = 0.2
KEEPALIVE_S = 30.0  # the Hub's
PAGE_SIZE = 50
WATCH_S = 0.25
WORKERS = 4
MAX_SAID = 20
START_TIMEOUT_S = 30.0  # for the server itself to listen or close
HARNESSES = "/api/agent-harnesses"  # public on the Hub (module docstring)
TELEMETRY = "/api/telemetry/"  # public on the Hub (module docstring)


class Runner(Protocol):
    """What the bridge asks of the rehearsal (``deploy.rehearsal.starter``)."""

    def refusal(self, spec: JobSpec) -> str | None:
        """Why this rehearsal cannot run ``spec`` (its image, its bucket), or None."""

    def start(self, spec: JobSpec, secrets: Mapping[str, str]) -> LocalJob:
        """Start ``spec``'s command as the rehearsal starts a job (blocking, bounded)."""

    def stop(self, job: LocalJob) -> None:
        """Stop ``job`` as the rehearsal stops one, and take it out of the group's DNS."""


class Bridge:
    """``start(host)`` serves from a thread of its own; ``attach`` the runner before any job
    can call (the jobs learn the URL from ``start``); ``close`` at the end."""

    def __init__(
        self,
        book: Book,
        *,
        token: str,
        namespace: str,
        group: str,
        say: Callable[[str], None],
        max_jobs: int = MAX_API_JOBS,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.book, self.token, self.namespace, self.group = book, token, namespace, group
        self.say, self.max_jobs, self.page_size = say, max_jobs, page_size
        self.runner: Runner | None = None
        self.url = ""
        self.calls = 0  # Jobs API calls answered
        self.refusals = 0  # requests refused before any Jobs API handler (token, route)
        self.streams = 0
        self._said = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bridge", daemon=True)
        self._pool = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="bridge")
        self._site: web.AppRunner | None = None
        self._watcher: asyncio.Task[None] | None = None

    def start(self, host: str) -> str:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._serve(host), self._loop).result(
            START_TIMEOUT_S
        )
        return self.url

    def attach(self, runner: Runner) -> None:
        self.runner = runner

    def close(self) -> None:
        """Stop answering and watching; wait for starts under way (their jobs are then the
        rehearsal's to stop, with every other)."""
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(self._shut(), self._loop)
            with contextlib.suppress(TimeoutError, concurrent.futures.TimeoutError):
                done.result(START_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=START_TIMEOUT_S)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._loop.close()

    def summary(self) -> str:
        return (
            f"bridge: answered {self.calls} Jobs API call(s), started {self.book.asked()} "
            f"job(s) for them, refused {self.refusals} other request(s)"
        )

    def tell(self, line: str) -> None:
        """Say a refusal, up to ``MAX_SAID`` of them."""
        self._said += 1
        if self._said <= MAX_SAID:
            self.say(line)
        elif self._said == MAX_SAID + 1:
            self.say(f"bridge: more than {MAX_SAID} refusals: the rest are counted, not said")

    async def _serve(self, host: str) -> str:
        app = web.Application(middlewares=[_guard], client_max_size=MAX_BODY_BYTES)
        app[BRIDGE] = self
        add = app.router
        add.add_get(HARNESSES, _harnesses)
        add.add_route("HEAD", TELEMETRY + "{topic:.+}", _telemetry)
        add.add_get("/api/whoami-v2", _whoami)
        add.add_post("/api/jobs/{ns}", _run_job)
        add.add_get("/api/jobs/{ns}", _list_jobs)
        add.add_get("/api/jobs/{ns}/{id}", _inspect_job)
        add.add_post("/api/jobs/{ns}/{id}/cancel", _cancel_job)
        add.add_get("/api/jobs/{ns}/{id}/logs", _job_logs)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, 0)
        await site.start()
        self._site = runner
        self._watcher = asyncio.create_task(self._watch())
        port = runner.addresses[0][1]
        return f"http://{host}:{port}"

    async def _shut(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self._site is not None:
            await self._site.cleanup()

    async def _watch(self) -> None:
        """Stop each job cancelled, and each job of the API's that ended (its DNS names go)."""
        while True:
            try:
                for job in self.book.all():
                    local = job.local
                    ended = local is not None and local.exit_code() is not None
                    if local is None or job.stopping:
                        continue
                    if job.cancelled or (job.origin == "api" and ended):
                        job.stopping = True
                        self._loop.run_in_executor(self._pool, self._stop, job, local)
            except Exception as exc:  # never dies: said, and the next look tries again
                self.say(f"bridge: its watcher failed ({exc!r}); it goes on")
            await asyncio.sleep(WATCH_S)

    def _stop(self, job: BridgeJob, local: LocalJob) -> None:
        assert self.runner is not None, "a job started without a runner"
        try:
            self.runner.stop(local)
        except Exception as exc:
            self.say(f"bridge: stopping {job.name} failed ({exc!r}): the rehearsal's end stops it")
            return
        why = "cancelled through the Jobs API" if job.cancelled else "ended"
        self.say(f"bridge: {job.name} {why}: stopped, out of the group's DNS")

    def launch(self, job: BridgeJob, spec: JobSpec, secrets: Mapping[str, str]) -> None:
        self._loop.run_in_executor(self._pool, self._start, job, spec, secrets)

    def _start(self, job: BridgeJob, spec: JobSpec, secrets: Mapping[str, str]) -> None:
        assert self.runner is not None, "run_job answered without a runner"
        try:
            job.attach(self.runner.start(spec, secrets))
        except Exception as exc:
            job.failure = " ".join(str(exc).split())[:500] or type(exc).__name__
            self.say(f"bridge: {job.name} could not be started: {job.failure}")

    def answer(self, job: BridgeJob) -> dict[str, Any]:
        stage, message = job.stage()
        return job_answer(
            job_id=job.id, namespace=self.namespace, initiator=self.namespace, spec=job.spec,
            stage=stage, message=message, created_at=job.created_at,
            expose_urls=exposed_urls(job.id, job.spec),
        )  # fmt: skip


BRIDGE = web.AppKey("bridge", Bridge)


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The route first, then the token; every failure one JSON line, never an exception out."""
    bridge = request.app[BRIDGE]
    where = f"{request.method} {request.path}"
    if request.match_info.route.resource is None:  # not a route of the Jobs API
        bridge.refusals += 1
        bridge.tell(f"bridge: refused {where}: the rehearsal's Hub serves the Jobs API only")
        return error(404, "the rehearsal's Hub serves the Jobs API only: nothing is downloaded")
    if request.path == HARNESSES or request.path.startswith(TELEMETRY):
        return await handler(request)
    if not bearer_matches(request, bridge.token):
        bridge.refusals += 1
        bridge.tell(f"bridge: refused {where}: no or a wrong token (the job's HF_TOKEN is it)")
        return refused()
    bridge.calls += 1
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 500 or exc.status == 413:
            bridge.tell(f"bridge: {where} answered {exc.status} ({exc.reason})")
        return error(exc.status, exc.text or exc.reason)
    except Exception as exc:
        bridge.tell(f"bridge: {where} failed ({exc!r}): answered 500, the rehearsal goes on")
        return error(500, f"the rehearsal's Hub failed on this call ({type(exc).__name__})")


def _namespace(request: web.Request) -> None:
    bridge = request.app[BRIDGE]
    if request.match_info["ns"] != bridge.namespace:
        raise web.HTTPForbidden(
            text=f"the rehearsal runs namespace {bridge.namespace}'s jobs only: "
            f"pass namespace={bridge.namespace!r}"
        )


def _job(request: web.Request) -> BridgeJob:
    _namespace(request)
    job = request.app[BRIDGE].book.get(request.match_info["id"])
    if job is None:
        raise web.HTTPNotFound(text="Job not found")
    return job


async def _harnesses(request: web.Request) -> web.Response:
    return web.json_response({"standardEnvVars": [], "harnesses": {}})


async def _telemetry(request: web.Request) -> web.Response:
    return web.Response()


async def _whoami(request: web.Request) -> web.Response:
    name = request.app[BRIDGE].namespace
    return web.json_response({"type": "user", "id": f"id-{name}", "name": name, "orgs": []})


async def _run_job(request: web.Request) -> web.Response:
    bridge = request.app[BRIDGE]
    _namespace(request)
    try:
        body = await request.json()
    except (JSONDecodeError, UnicodeDecodeError):
        return error(400, "the job spec must be JSON")
    try:
        spec, secrets = _checked(bridge, body)
    except Refused as exc:
        bridge.tell(f"bridge: refused a run_job: {exc}")
        return error(400, str(exc))
    if bridge.book.asked() >= bridge.max_jobs:
        bridge.tell(f"bridge: refused {spec.name}: {bridge.max_jobs} jobs started already")
        return error(
            429,
            f"the rehearsal starts at most {bridge.max_jobs} jobs through its Hub: a job "
            "that launches more than that is what the rehearsal is there to catch",
        )
    job = bridge.book.add({**body, "secrets": dict.fromkeys(secrets)})
    bridge.launch(job, spec, secrets)
    return web.json_response(bridge.answer(job))


def _checked(bridge: Bridge, body: object) -> tuple[JobSpec, dict[str, str]]:
    """The spec and its secrets, or ``Refused`` naming what the rehearsal cannot run."""
    said = spec_refusal(body)
    if said is not None:
        raise Refused(said)
    assert isinstance(body, dict)
    spec, secrets = job_spec(body)
    assert spec.network is not None
    if spec.network.group != bridge.group:
        raise Refused(
            f"the rehearsal has one network group, {bridge.group} (got {spec.network.group})"
        )
    said = bridge.runner.refusal(spec) if bridge.runner is not None else "it is starting up"
    if said is not None:
        raise Refused(said)
    return spec, secrets


async def _list_jobs(request: web.Request) -> web.Response:
    bridge = request.app[BRIDGE]
    _namespace(request)
    found = [job for job in bridge.book.all() if wanted(request, job.labels, job.stage()[0])]
    jobs, headers = page(found, request, bridge.page_size)
    return web.json_response([bridge.answer(job) for job in jobs], headers=headers)


async def _inspect_job(request: web.Request) -> web.Response:
    return web.json_response(request.app[BRIDGE].answer(_job(request)))


async def _cancel_job(request: web.Request) -> web.Response:
    bridge = request.app[BRIDGE]
    job = _job(request)
    if not job.ended:
        job.cancelled = True
        bridge.say(f"bridge: {job.name} cancelled through the Jobs API: stopping it")
    return web.json_response({})


async def _job_logs(request: web.Request) -> web.StreamResponse:
    bridge = request.app[BRIDGE]
    job = _job(request)
    if bridge.streams >= MAX_STREAMS:
        return error(429, f"the rehearsal's Hub streams {MAX_STREAMS} logs at once: ask again")
    bridge.streams += 1
    try:
        return await log_stream(
            request, created_at=job.created_at, lines=job.log_lines, ended=lambda: job.ended,
            keepalive_s=KEEPALIVE_S, clock=time.monotonic, tick_s=STREAM_TICK_S,
            max_s=STREAM_MAX_S,
        )  # fmt: skip
    finally:
        bridge.streams -= 1
