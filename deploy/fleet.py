"""Shared fleets on HF Jobs: the commands around one (``deploy fleet up|down|status``) and the
check a run makes before joining one (``deploy up --fleet``).

A fleet F is the jobs labelled ``rollout-run: F`` (its replicas and its proxy job); the runs on
it are the trainer jobs labelled ``rollout-fleet: F`` and another ``rollout-run``. So ``deploy
down --run-name R`` of a run on a fleet stops that run's trainer alone; ``deploy fleet down``
stops the fleet, and refuses while runs still train on it unless ``--force`` (which stops them
too: a trainer without its fleet would bill on, failing).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deploy import hints
from deploy.errors import DeployError
from deploy.health import Prober
from deploy.jobs import HubJobs, JobView
from deploy.plan import PORT, RunPlan
from deploy.specs import FLEET_LABEL
from deploy.status import job_line, report
from deploy.teardown import down


def runs_on(jobs: HubJobs, fleet: str) -> list[JobView]:
    """The trainer jobs of the runs on ``fleet`` (not the fleet's own jobs)."""
    return [job for job in jobs.labelled(FLEET_LABEL, fleet) if job.role == "trainer"]


def require_fleet(jobs: HubJobs, fleet: str, endpoint: str | None) -> JobView:
    """The fleet's running proxy job, or a ``DeployError`` saying how to start the fleet."""
    proxies = [job for job in jobs.of_run(fleet) if job.role == "proxy" and not job.terminal]
    running = [job for job in proxies if job.stage == "RUNNING"]
    if running:
        return running[0]
    found = f"its proxy job is {proxies[0].stage}" if proxies else "no proxy job of it is active"
    raise DeployError(
        f"fleet {fleet!r} is not up in namespace {jobs.namespace} ({found}): start it with "
        f"`deploy fleet up --fleet {fleet} ...`, or check it: "
        f"{hints.fleet_command('status', fleet, jobs.namespace, endpoint)}"
    )


def fleet_down(
    jobs: HubJobs, fleet: str, say: Callable[[str], None], *, force: bool, endpoint: str | None
) -> None:
    """Cancel the fleet's jobs; refuses while runs train on it, unless ``force``."""
    training = [job for job in runs_on(jobs, fleet) if not job.terminal]
    if training and not force:
        names = ", ".join(f"{job.name} ({job.stage})" for job in training)
        raise DeployError(
            f"runs still train on fleet {fleet!r}: {names}. Stop each with `deploy down "
            f"--run-name RUN`, or stop them with the fleet: "
            f"{hints.fleet_command('down', fleet, jobs.namespace, endpoint, '--force')}"
        )
    for job in training:
        jobs.cancel(job.id)
        say(f"{job.name} (job {job.id}): cancelled with its fleet (was {job.stage})")
    down(jobs, fleet, say)


def _runs_line(status: Mapping[str, Any]) -> str:
    runs = status.get("runs") or {}
    if not runs:
        return "runs declared on the proxy: none yet"
    parts = [
        f"{name} (weight {run.get('weight', '?'):g}, adapters {run.get('adapters', 0)}/"
        f"{run.get('max_loras_share', '?')}, in flight {run.get('inflight', 0)}, "
        f"queued {run.get('queued', 0)})"
        for name, run in sorted(runs.items())
    ]
    return "runs declared on the proxy: " + ", ".join(parts)


def fleet_status(jobs: HubJobs, fleet: str, token: str, probe: Prober) -> str:
    """The fleet's jobs (``deploy status``'s report), the runs its proxy serves, and the runs'
    trainer jobs."""
    lines = [report(jobs, fleet, token, probe)]
    proxy = next((j for j in jobs.of_run(fleet) if j.role == "proxy" and j.stage == "RUNNING"),
                 None)  # fmt: skip
    url = proxy.url(PORT) if proxy is not None else None
    if url is not None:
        figures = probe(f"{url}/proxy/status", token)
        if figures.ok and isinstance(figures.body, Mapping):
            lines.append(f"      {_runs_line(figures.body)}")
    trainers = runs_on(jobs, fleet)
    lines.append(f"runs on fleet {fleet}: {len(trainers)} trainer job(s)")
    lines += [job_line(job, "") for job in trainers]
    return "\n".join(lines)


def fleet_summary(plan: RunPlan, views: Sequence[JobView], endpoint: str | None) -> str:
    """What ``deploy fleet up`` launched, and how to put runs on it and stop it."""
    namespace = plan.namespace

    def hint(subcommand: str) -> str:
        return hints.fleet_command(subcommand, plan.run_name, namespace, endpoint)

    lines = [f"fleet {plan.run_name} is up in namespace {namespace}:"]
    for job in views:
        url = job.url(PORT) or ""
        lines.append(f"  {job.name:<28} job {job.id}  {job.flavor:<12} {job.stage:<10} {url}")
    lines += [
        f"put a run on it:  python -m deploy up --fleet {plan.run_name} --run-name RUN "
        f"--bucket {plan.bucket} --model {shlex.quote(plan.model)} -- <trainer flags>",
        f"watch it:         {hint('status')}",
        f"stop it:          {hint('down')}   (GPU jobs "
        f"bill until stopped or timed out: the replicas after {plan.timeout('replica')})",
    ]
    return "\n".join(lines)


def joined_summary(plan: RunPlan, views: Sequence[JobView], endpoint: str | None) -> str:
    """What ``deploy up --fleet`` launched: the run's trainer, and how to follow and stop it."""
    assert plan.fleet is not None
    namespace = plan.namespace

    def hint(subcommand: str, *extra: str) -> str:
        return hints.command(subcommand, plan.run_name, namespace, endpoint, *extra)

    lines = [f"run {plan.run_name} is up on fleet {plan.fleet} in namespace {namespace}:"]
    lines += [f"  {job.name:<28} job {job.id}  {job.flavor:<12} {job.stage}" for job in views]
    lines += [
        f"adapters: hf://buckets/{plan.bucket}/{plan.run_name}/.vllm_lora (the replicas hold "
        f"them as {plan.run_name}.trl-policy-vN)",
        f"follow the trainer: {hint('logs', '--role', 'trainer', '--follow')}",
        f"watch the fleet:    {hints.fleet_command('status', plan.fleet, namespace, endpoint)}",
        f"stop this run:      {hint('down')}   (the fleet and its other runs go on)",
    ]
    return "\n".join(lines)
