"""``deploy status``: every job of a run with its stage and health, and the proxy's figures.

Health is probed through each serving job's exposed URL with the bearer token. The proxy's
``GET /proxy/status`` adds its routing and adapter figures and, for each replica it cannot route
to, why (``pending: probe answered HTTP 401`` when a replica refuses its token): the proxy job's
in topology ``job``, the sidecar's (the trainer job exposes its port) in topology ``sidecar``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deploy.errors import DeployError
from deploy.health import Prober
from deploy.jobs import HubJobs, JobView
from deploy.plan import PORT
from deploy.specs import RUN_LABEL


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
    return lines


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
    if job.message:
        line += f" ({job.message})"
    line = f"{line}  {health}".rstrip()
    if job.retries:
        line += f"  (retried on failure: {job.retries + 1} runs in all)"
    if job.network:
        line += f"  [network {job.network}]"
    return line


def report(jobs: HubJobs, run_name: str, token: str, probe: Prober) -> str:
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
    return "\n".join(lines)
