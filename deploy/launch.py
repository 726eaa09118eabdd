"""``deploy up``: bucket, code, replicas, (proxy,) trainer, each wave waited on before the next.

Order: refuse a run name that still has active jobs; create the bucket if missing (refuse a
public one); publish the code; launch the N replicas and wait until each is RUNNING and answers
``/health`` through its exposed URL; in topology ``job`` launch the proxy pointed at those URLs
and wait until it routes to every replica; launch the trainer and wait until it runs and, in
topology ``sidecar``, until the proxy inside it routes to every replica (its port is exposed for
that and for ``deploy status``): only then is the run up. Any failure (a job ending in ERROR, the
wait timing out, a Hub call failing, Ctrl-C) cancels every job launched so far unless ``keep``,
and becomes a ``DeployError`` naming the job, its last log lines and what to do next.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from deploy import hints
from deploy.clock import Clock
from deploy.errors import DeployError
from deploy.fleet import require_fleet
from deploy.health import Prober
from deploy.jobs import HUB_ERRORS, HubJobs, JobView
from deploy.plan import PORT, RunPlan
from deploy.plan_jobs import proxy_spec, replica_spec, trainer_specs
from deploy.readiness import HEALTH, Check, JobFailed, NotReady, Target, routes_to, wait_ready
from deploy.specs import JobSpec

LOG_LINES_ON_FAILURE = 20
REPLICA_KEY_BYTES = 32  # the run's replica key: 256 random bits, URL-safe text


@dataclass
class Launch:
    jobs: HubJobs
    plan: RunPlan
    token: str = field(repr=False)
    probe: Prober
    clock: Clock
    say: Callable[[str], None]
    publish: Callable[[], None]
    ready_timeout_s: float = 1800.0
    poll_s: float = 5.0
    keep: bool = False
    endpoint: str | None = None
    allow_public_bucket: bool = False
    launched: list[JobView] = field(default_factory=list)
    # Made for this run, handed to its jobs as a secret; on the private network the replicas
    # demand it and the proxy sends it (plan.secret_values).
    replica_key: str = field(
        default_factory=lambda: secrets.token_urlsafe(REPLICA_KEY_BYTES), repr=False
    )

    def hint(self, subcommand: str, *extra: str) -> str:
        return hints.command(
            subcommand, self.plan.run_name, self.jobs.namespace, self.endpoint, *extra
        )

    def up(self) -> list[JobView]:
        """Launch the run; return the final view of every job, in launch order."""
        self.refuse_active_run()
        self.say(f"bucket {self.plan.bucket}: creating it (private) unless it exists")
        self.check_visibility(self.jobs.ensure_bucket(self.plan.bucket))
        self.publish()
        try:
            return self.launch_fleet()
        except JobFailed as failed:
            raise self.abort(self.failure_report(failed.job)) from None
        except NotReady as late:
            raise self.abort(self.timeout_report(late)) from None
        except HUB_ERRORS as exc:
            raise self.abort(f"a Hub call failed: {exc}") from None
        except KeyboardInterrupt:
            raise self.abort("interrupted") from None

    def launch_fleet(self) -> list[JobView]:
        plan = self.plan
        if plan.fleet is not None:  # a run on a shared fleet: its trainer joins the fleet's
            require_fleet(self.jobs, plan.fleet, self.endpoint)
            trainers = [self.start(spec) for spec in trainer_specs(plan)]
            self.say(f"waiting for the trainer to start (it declares run {plan.run_name} on the "
                     f"proxy of fleet {plan.fleet})")  # fmt: skip
            self.wait_trainers(trainers, None)
            return [self.jobs.inspect(job.id) for job in self.launched]
        replicas = [self.start(replica_spec(plan, index)) for index in range(plan.replicas)]
        self.say(f"waiting for {len(replicas)} replica(s) to be RUNNING and healthy")
        urls = self.serving_urls(replicas, HEALTH)
        routes = routes_to(plan.replicas)
        if plan.topology == "sidecar":
            trainers = [self.start(spec) for spec in trainer_specs(plan, replica_urls=urls)]
            self.say("waiting for the trainer to start and its proxy to route to every replica")
            self.wait_trainers(trainers, routes)
        else:
            proxy = self.start(proxy_spec(plan, urls))
            self.say("waiting for the proxy to be RUNNING and to route to every replica")
            (proxy_url,) = self.serving_urls([proxy], routes)
            if plan.shared:  # a fleet: its runs come later (deploy up --fleet)
                return [self.jobs.inspect(job.id) for job in self.launched]
            trainers = [self.start(spec) for spec in trainer_specs(plan, proxy_url=proxy_url)]
            self.say("waiting for the trainer to start")
            self.wait_trainers(trainers, None)
        return [self.jobs.inspect(job.id) for job in self.launched]

    def wait_trainers(self, trainers: Sequence[JobView], check: Check | None) -> None:
        """Node 0 with ``check`` (its proxy side), the other nodes RUNNING."""
        self.wait_targets([Target(trainers[0], check), *(Target(t, None) for t in trainers[1:])])

    def start(self, spec: JobSpec) -> JobView:
        job = self.jobs.launch(spec, self.plan.secret_values(self.token, self.replica_key))
        self.launched.append(job)
        where = f", network group {spec.network.group}" if spec.network else ""
        self.say(f"launched {spec.name}: job {job.id} ({spec.flavor}, {spec.image}{where})")
        return job

    def wait(self, jobs: Sequence[JobView], check: Check | None) -> dict[str, JobView]:
        return self.wait_targets([Target(job, check) for job in jobs])

    def wait_targets(self, targets: Sequence[Target]) -> dict[str, JobView]:
        return wait_ready(
            self.jobs,
            targets,
            token=self.token,
            probe=self.probe,
            clock=self.clock,
            timeout_s=self.ready_timeout_s,
            poll_s=self.poll_s,
            say=self.say,
        )

    def serving_urls(self, jobs: Sequence[JobView], check: Check) -> list[str]:
        ready = self.wait(jobs, check)
        urls = [ready[job.id].url(PORT) for job in jobs]
        return [url for url in urls if url is not None]

    def check_visibility(self, private: bool) -> None:
        """An existing bucket keeps its visibility: refuse a public one unless allowed."""
        if private:
            return
        bucket = self.plan.bucket
        settings = f"{self.jobs.api.endpoint.rstrip('/')}/buckets/{bucket}"
        if self.allow_public_bucket:
            self.say(
                f"bucket {bucket} is public (--allow-public-bucket): the wheel and every adapter "
                "of the run are readable by anyone"
            )
            return
        raise DeployError(
            f"bucket {bucket} exists and is public: the wheel and every adapter of the run would "
            f"be readable by anyone. Make it private in its settings ({settings}), choose another "
            "--bucket (a new one is created private), or pass --allow-public-bucket"
        )

    def refuse_active_run(self) -> None:
        active = [job for job in self.jobs.of_run(self.plan.run_name) if not job.terminal]
        if active:
            names = ", ".join(f"{job.name} ({job.stage})" for job in active)
            raise DeployError(
                f"run {self.plan.run_name!r} already has {len(active)} active job(s): {names}. "
                f"Choose another --run-name, or stop them first: {self.hint('down')}"
            )

    def failure_report(self, job: JobView) -> str:
        lines = [f"{job.name} (job {job.id}) ended in {job.stage}"]
        if job.message:
            lines[0] += f": {job.message}"
        try:
            logs = list(self.jobs.logs(job.id, tail=LOG_LINES_ON_FAILURE))
        except HUB_ERRORS as exc:
            lines.append(f"(its logs could not be fetched: {exc})")
        else:
            if logs:
                lines.append(f"last {len(logs)} log line(s) of {job.name}:")
                lines += [f"  | {line}" for line in logs]
        lines.append(f"all its logs: {self.hint('logs', '--job', job.id)}")
        return "\n".join(lines)

    def timeout_report(self, late: NotReady) -> str:
        lines = [
            f"not ready after {late.waited_s:.0f} s (--ready-timeout {self.ready_timeout_s:g}):"
        ]
        lines += [f"  {job.name} (job {job.id}): {shown}" for job, shown in late.pending]
        proxies = [job for job, _ in late.pending if job.role in ("trainer", "proxy")]
        if proxies:
            role = proxies[0].role
            refused = (
                "refused the run's key (VLLM_API_KEY, which deploy gives the replicas and the "
                "proxy alike)"
                if self.plan.private
                else "refused the job's HF_TOKEN (deploy passes yours: it needs read access to "
                f"the namespace {self.jobs.namespace})"
            )
            lines.append(
                f"the {role}'s proxy does not reach every replica: a replica that answers 401 "
                f"{refused}; else the image may still be installing. Raise --ready-timeout, or "
                f"read its logs: {self.hint('logs', '--role', role)}"
            )
        else:
            lines.append(
                "a GPU may still be scheduling or the model still loading: raise --ready-timeout, "
                f"or read their logs: {self.hint('logs', '--role', 'replica')}"
            )
        return "\n".join(lines)

    def abort(self, reason: str) -> DeployError:
        """Cancel what was launched (unless ``keep``) and say so after ``reason``."""
        lines = [f"deploy up failed: {reason}"]
        if self.keep:
            lines.append(
                f"kept {len(self.launched)} job(s) running (--keep); stop them with: "
                f"{self.hint('down')}"
            )
            return DeployError("\n".join(lines))
        cancelled, failed = [], []
        for job in self.launched:
            try:
                if not self.jobs.inspect(job.id).terminal:
                    self.jobs.cancel(job.id)
                    cancelled.append(job.name)
            except HUB_ERRORS as exc:
                failed.append(f"{job.name} ({job.id}): {exc}")
        if cancelled:
            lines.append(f"cancelled the other job(s) of the run: {', '.join(cancelled)}")
        if failed:
            lines.append("could not cancel: " + "; ".join(failed))
            lines.append(f"retry with: {self.hint('down')}")
        lines.append("fix the cause above, then run `deploy up` again")
        return DeployError("\n".join(lines))


def summary(plan: RunPlan, jobs: Sequence[JobView], namespace: str, endpoint: str | None) -> str:
    """What was launched and how to follow, watch and stop it."""

    def hint(subcommand: str, *extra: str) -> str:
        return hints.command(subcommand, plan.run_name, namespace, endpoint, *extra)

    lines = [f"run {plan.run_name} is up in namespace {namespace} (topology {plan.topology}):"]
    for job in jobs:
        url = job.url(PORT) or ""
        lines.append(f"  {job.name:<28} job {job.id}  {job.flavor:<12} {job.stage:<10} {url}")
    adapters = f"hf://buckets/{plan.bucket}/{plan.run_name}/.vllm_lora"
    role = "trainer" if plan.topology == "sidecar" else "proxy"
    proxy = next((job.url(PORT) for job in jobs if job.role == role), None)
    proxy_url = proxy or f"https://<{role} job id>--{PORT}.hf.jobs"
    lines += [
        f"adapters: {adapters} (at {plan.adapters_dir} in every job)",
        f"follow the trainer: {hint('logs', '--role', 'trainer', '--follow')}",
        f"watch the run:      {hint('status')}",
        f"watch the proxy:    HF_TOKEN=... rollout-proxy top {proxy_url}",
        f"scrape its metrics: {proxy_url}/metrics with 'Authorization: Bearer <HF token>' "
        "(Prometheus: monitoring/prometheus/prometheus.yml, job rollout-proxy-hf-jobs; "
        "dashboard: monitoring/grafana/rollout-proxy.json)",
        f"stop every job:     {hint('down')}   (GPU jobs bill until stopped or timed out: "
        f"the trainer after {plan.timeout('trainer')}, the replicas after "
        f"{plan.timeout('replica')})",
    ]
    return "\n".join(lines)
