"""``deploy status``: every job of a run with its stage and health, and the proxy's figures.

Health is probed through each serving job's exposed URL with the bearer token. The proxy's
``GET /proxy/status`` adds its routing and adapter figures and, for each replica it cannot route
to, why (``pending: probe answered HTTP 401`` when a replica refuses its token): the proxy job's
in topology ``job``, the sidecar's (the trainer job exposes its port) in topology ``sidecar``,
and the run's scaler's last decision when its fleet sizes itself (a job the scaler launched is
marked ``scaled``). The last line is what the run has cost so far: each job's time from its
start (its creation, with a client too old to say) to its end (or now), at its flavor's price.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from deploy.errors import DeployError
from deploy.health import Prober
from deploy.jobs import HubJobs, JobView
from deploy.plan import PORT
from deploy.prices import DOLLARS_PER_HOUR
from deploy.specs import RUN_LABEL
from proxy.console.view import scaler_lines


def proxy_figures(status: Mapping[str, Any]) -> list[str]:
    """Readable lines from the proxy's ``/proxy/status`` JSON (fields it lacks are skipped)."""
    routing = [f"policy {status.get('policy', '?')}"]
    for key in ("inflight", "queued", "max_inflight"):
        if key in status:
            routing.append(f"{key} {status[key]}")
    routing += [f"{key} {value}" for key, value in dict(status.get("routing") or {}).items()]
    lines = ["routing: " + ", ".join(routing)]
    replicas = list(status.get("replicas") or [])
    if replicas:
        routable = sum(1 for replica in replicas if replica.get("routable"))
        states = ", ".join(
            f"{r.get('url', r.get('id', '?'))} {r.get('state', '?')}"
            + (f": {r['last_error']}" if r.get("last_error") and not r.get("routable") else "")
            for r in replicas
        )
        lines.append(f"replicas: {routable}/{len(replicas)} routable ({states})")
    adapters = status.get("adapters")
    if isinstance(adapters, Mapping):
        wanted = adapters.get("wanted") or []
        loading = adapters.get("loading") or []
        lines.append(
            f"adapters: newest {adapters.get('newest') or 'none yet'}, "
            f"{len(wanted)} wanted, {len(loading)} loading, window {adapters.get('window', '?')}"
        )
        lines += _push_figures(adapters)
    if status.get("paused"):
        lines.append("paused: yes (the trainer is syncing weights; the fleet is frozen)")
    elif (status.get("syncs") or {}).get("open"):
        lines.append("syncing: yes (the trainer is syncing weights; the fleet keeps generating)")
    return lines + scaler_lines(status.get("scaler"))


def _push_figures(adapters: Mapping[str, Any]) -> list[str]:
    if "push" not in adapters:
        return []
    if not adapters["push"]:
        return ["adapters: not pushed (--no-adapter-push): every replica loads from its mount"]
    receivers = adapters.get("receivers") or {}
    without = sorted(rid for rid, present in receivers.items() if not present)
    present = len(receivers) - len(without)
    line = f"adapters: pushed; receivers on {present}/{len(receivers)} replicas"
    return [line + (f" (mount for {', '.join(without)})" if without else "")]


def job_line(job: JobView, health: str) -> str:
    line = f"  {job.name:<28} job {job.id}  {job.flavor:<12} {job.stage}"
    if job.scaled:
        line += " (scaled)"
    if job.message:
        line += f" ({job.message})"
    line = f"{line}  {health}".rstrip()
    if job.retries:
        line += f"  (retried on failure: {job.retries + 1} runs in all)"
    if job.network:
        line += f"  [network {job.network}]"
    return line


def ran(views: list[JobView], now: float) -> str:
    """What the run's jobs have cost so far (module docstring), per flavor."""
    hours: dict[str, float] = {}
    for view in views:
        began = view.started_at if view.started_at is not None else view.created_at
        if began is None:
            continue
        ended = view.finished_at
        if ended is None and not view.terminal:
            ended = now
        if ended is None:  # ended, but the client does not say when: not counted
            continue
        hours[view.flavor] = hours.get(view.flavor, 0.0) + max(ended - began, 0.0) / 3600
    priced = sum(DOLLARS_PER_HOUR[f] * h for f, h in hours.items() if f in DOLLARS_PER_HOUR)
    parts = ", ".join(f"{h:.2f} h x {flavor}" for flavor, h in sorted(hours.items()))
    unknown = sorted(flavor for flavor in hours if flavor not in DOLLARS_PER_HOUR)
    line = f"ran so far: {parts or 'nothing'}: ${priced:.2f}"
    return line + (f" (plus {', '.join(unknown)}: no price here)" if unknown else "")


def report(
    jobs: HubJobs, run_name: str, token: str, probe: Prober, now: float | None = None
) -> str:
    views = jobs.of_run(run_name)
    if not views:
        raise DeployError(
            f"no jobs labelled {RUN_LABEL}={run_name} in namespace {jobs.namespace}: check "
            "--run-name and --namespace (the namespace the jobs run in, by default the "
            "bucket's)"
        )
    lines = [f"run {run_name} in namespace {jobs.namespace}: {len(views)} job(s)"]
    has_proxy_job = any(view.role == "proxy" for view in views)
    proxy_role = "proxy" if has_proxy_job else "trainer"
    for view in views:
        url = view.url(PORT) if view.stage == "RUNNING" else None
        health = ""
        if url is not None:
            probe_result = probe(f"{url}/health", token)
            health = f"{url} " + (
                "healthy" if probe_result.ok else f"unhealthy ({probe_result.detail})"
            )
        lines.append(job_line(view, health))
        if view.role == proxy_role and url is not None:
            figures = probe(f"{url}/proxy/status", token)
            if figures.ok and isinstance(figures.body, Mapping):
                lines += [f"      {line}" for line in proxy_figures(figures.body)]
            else:
                lines.append(f"      /proxy/status unavailable ({figures.detail})")
    lines.append(ran(views, time.time() if now is None else now))
    return "\n".join(lines)
