"""Waiting for launched jobs to be RUNNING and, where they serve, healthy.

Each poll inspects every pending job, probes ``<exposed URL>/health`` with the bearer token once
the job is RUNNING, and prints one line per job whenever what it shows changes (stage, health).
``judge`` is the pure decision; ``wait_ready`` is the loop around it. Cost per poll: one
``inspect_job`` and at most one GET per pending job. A job in a terminal stage ends the wait with
``JobFailed``; the deadline ends it with ``NotReady``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from deploy.clock import Clock
from deploy.health import Probe, Prober
from deploy.jobs import TERMINAL_STAGES, HubJobs, JobView
from deploy.plan import PORT

Verdict = Literal["waiting", "ready", "failed"]


@dataclass(frozen=True)
class Target:
    job: JobView
    serves: bool  # probe /health through the exposed URL before calling it ready


@dataclass(frozen=True)
class Seen:
    """One observation of a job: its stage and, once RUNNING, its exposed URL and health."""

    stage: str
    message: str | None = None
    url: str | None = None
    health: Probe | None = None


class JobFailed(Exception):
    def __init__(self, job: JobView) -> None:
        super().__init__(f"{job.name} ({job.id}) ended in {job.stage}")
        self.job = job


class NotReady(Exception):
    def __init__(self, waited_s: float, pending: Sequence[tuple[JobView, str]]) -> None:
        super().__init__(f"{len(pending)} job(s) not ready after {waited_s:.0f} s")
        self.waited_s = waited_s
        self.pending = list(pending)


def judge(seen: Seen, serves: bool) -> Verdict:
    if seen.stage == "COMPLETED" and not serves:
        return "ready"  # a job with nothing to serve may finish before we look
    if seen.stage in TERMINAL_STAGES:
        return "failed"
    if seen.stage != "RUNNING":
        return "waiting"
    if not serves:
        return "ready"
    return "ready" if seen.health is not None and seen.health.ok else "waiting"


def describe(seen: Seen, serves: bool) -> str:
    text = seen.stage + (f" ({seen.message})" if seen.message else "")
    if seen.stage != "RUNNING" or not serves:
        return text
    if seen.url is None:
        return f"{text}, waiting for its exposed URL"
    if seen.health is None:
        return f"{text}, {seen.url}"
    state = "healthy" if seen.health.ok else f"/health not ready yet ({seen.health.detail})"
    return f"{text}, {seen.url} {state}"


def observe(jobs: HubJobs, target: Target, token: str, probe: Prober) -> tuple[JobView, Seen]:
    view = jobs.inspect(target.job.id)
    url = view.url(PORT) if target.serves else None
    health = probe(f"{url}/health", token) if url and view.stage == "RUNNING" else None
    return view, Seen(view.stage, view.message, url, health)


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
            line = describe(seen, target.serves)
            if shown.get(job_id) != line:
                shown[job_id] = line
                say(f"  [{clock.monotonic() - start:5.0f}s] {view.name} ({view.id}): {line}")
            verdict = judge(seen, target.serves)
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
