"""Waiting for launched jobs to be RUNNING and, where they serve, ready.

What ready means is a job's ``Check``: a replica answers ``/health`` (``HEALTH``); a proxy (its
own job, or the sidecar inside the trainer job) lists every replica as routable on
``/proxy/status`` (``routes_to``): until then TRL would get 503s, e.g. when the replicas refuse the
proxy's token. Each poll inspects every pending job, probes ``<exposed URL><check.path>`` with
the bearer token once the job is RUNNING, and prints one line per job whenever what it shows
changes. ``judge`` and the assessments are pure; ``wait_ready`` is the loop around them. Cost per
poll: one ``inspect_job`` and at most one GET per pending job. A job in a terminal stage ends the
wait with ``JobFailed``; the deadline ends it with ``NotReady``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from deploy.clock import Clock
from deploy.health import Probe, Prober
from deploy.jobs import TERMINAL_STAGES, HubJobs, JobView
from deploy.plan import PORT

Verdict = Literal["waiting", "ready", "failed"]


@dataclass(frozen=True)
class Assessment:
    ok: bool
    detail: str  # what the job shows, for progress lines and error messages


@dataclass(frozen=True)
class Check:
    """A GET through the job's exposed URL, and what its answer means."""

    path: str
    assess: Callable[[Probe], Assessment]


def healthy(probe: Probe) -> Assessment:
    """A replica's ``/health``: ready once it answers 2xx."""
    if probe.ok:
        return Assessment(True, "healthy")
    return Assessment(False, f"/health not ready yet ({probe.detail})")


def routes_everywhere(probe: Probe, expected: int = 1) -> Assessment:
    """A proxy's ``/proxy/status``: ready once every replica it lists is routable, and it lists
    at least ``expected`` (on the private network it lists those its DNS lookup found so far)."""
    if not probe.ok or not isinstance(probe.body, Mapping):
        return Assessment(False, f"its proxy is not answering yet ({probe.detail})")
    replicas: list[Mapping[str, Any]] = list(probe.body.get("replicas") or [])
    down = [replica for replica in replicas if not replica.get("routable")]
    routable = len(replicas) - len(down)
    routing = f"its proxy routes to {routable}/{max(len(replicas), expected)} replicas"
    if routable >= max(expected, 1) and not down:
        return Assessment(True, routing)
    if not down:
        return Assessment(False, f"{routing} (waiting for the others to be found)")
    why = "; ".join(
        f"{replica.get('url', '?')}: {replica.get('last_error') or replica.get('state', '?')}"
        for replica in down
    )
    return Assessment(False, f"{routing} ({why or 'none given'})")


HEALTH = Check("/health", healthy)


def routes_to(replicas: int) -> Check:
    """A proxy that routes to ``replicas`` replicas, every one it lists."""
    return Check("/proxy/status", lambda probe: routes_everywhere(probe, replicas))


@dataclass(frozen=True)
class Target:
    job: JobView
    check: Check | None  # None: RUNNING is enough (nothing to probe)


@dataclass(frozen=True)
class Seen:
    """One observation of a job: its stage and, once RUNNING, its exposed URL and check."""

    stage: str
    message: str | None = None
    url: str | None = None
    assessed: Assessment | None = None


class JobFailed(Exception):
    def __init__(self, job: JobView) -> None:
        super().__init__(f"{job.name} ({job.id}) ended in {job.stage}")
        self.job = job


class NotReady(Exception):
    def __init__(self, waited_s: float, pending: Sequence[tuple[JobView, str]]) -> None:
        super().__init__(f"{len(pending)} job(s) not ready after {waited_s:.0f} s")
        self.waited_s = waited_s
        self.pending = list(pending)


def judge(seen: Seen, checked: bool) -> Verdict:
    if seen.stage == "COMPLETED" and not checked:
        return "ready"  # a job with nothing to serve may finish before we look
    if seen.stage in TERMINAL_STAGES:
        return "failed"
    if seen.stage != "RUNNING":
        return "waiting"
    if not checked:
        return "ready"
    return "ready" if seen.assessed is not None and seen.assessed.ok else "waiting"


def describe(seen: Seen, checked: bool) -> str:
    text = seen.stage + (f" ({seen.message})" if seen.message else "")
    if seen.stage != "RUNNING" or not checked:
        return text
    if seen.url is None:
        return f"{text}, waiting for its exposed URL"
    if seen.assessed is None:
        return f"{text}, {seen.url}"
    return f"{text}, {seen.url} {seen.assessed.detail}"


def observe(jobs: HubJobs, target: Target, token: str, probe: Prober) -> tuple[JobView, Seen]:
    view = jobs.inspect(target.job.id)
    check = target.check
    url = view.url(PORT) if check is not None else None
    assessed = None
    if check is not None and url and view.stage == "RUNNING":
        assessed = check.assess(probe(f"{url}{check.path}", token))
    return view, Seen(view.stage, view.message, url, assessed)


def wait_ready(
    jobs: HubJobs,
    targets: Sequence[Target],
    *,
    token: str,
    probe: Prober,
    clock: Clock,
    timeout_s: float,
    poll_s: float,
    say: Callable[[str], None],
) -> dict[str, JobView]:
    """Poll until every target is ready; return the latest view of each, by job id."""
    start = clock.monotonic()
    pending = {target.job.id: target for target in targets}
    shown: dict[str, str] = {}
    ready: dict[str, JobView] = {}
    latest: dict[str, JobView] = {}
    while True:
        for job_id, target in list(pending.items()):
            view, seen = observe(jobs, target, token, probe)
            latest[job_id] = view
            line = describe(seen, target.check is not None)
            if shown.get(job_id) != line:
                shown[job_id] = line
                say(f"  [{clock.monotonic() - start:5.0f}s] {view.name} ({view.id}): {line}")
            verdict = judge(seen, target.check is not None)
            if verdict == "failed":
                raise JobFailed(view)
            if verdict == "ready":
                ready[job_id] = view
                del pending[job_id]
        if not pending:
            return ready
        waited = clock.monotonic() - start
        if waited >= timeout_s:
            raise NotReady(waited, [(latest[job_id], shown[job_id]) for job_id in pending])
        clock.sleep(min(poll_s, max(timeout_s - waited, 0.0)))
