"""The rehearsal itself: the plan's jobs in launch order, waited on as ``deploy up`` waits.

Substitutions, each printed before anything starts (``stand_ins``): the Hub model becomes a local
tiny model and the Hub dataset a local file with the plan's columns (nothing is downloaded); the
replicas get the CPU build's vLLM flags after the planned ones, or are the simulated replica
(``replica_backend="sim"``, with ``sim_args``); the trainer trains ``steps`` steps of a CPU-sized
recipe. Everything else (images, install steps, flags, secrets, network aliases, mounts) is the
plan's. The replicas must answer ``/health``, the proxy (sidecar or its own job) must route to
every replica, then the trainer must train its steps through it and exit 0.

The Hub the jobs see is the rehearsal's bridge (``bridge``): the Jobs API, answered from this
rehearsal's jobs and starting new ones with the same starter (``starter``), at ``HF_ENDPOINT``
with a token made for the rehearsal (every job's ``HF_TOKEN`` secret); its summary closes the
output. A plan job cancelled through it is no failure of the rehearsal.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from deploy.errors import DeployError
from deploy.health import get
from deploy.install import project_version, source_root
from deploy.launch import REPLICA_KEY_BYTES
from deploy.plan import PORT, RunPlan
from deploy.plan_jobs import proxy_spec, trainer_specs
from deploy.preflight import trainer_options
from deploy.prices import cost_per_hour
from deploy.readiness import routes_everywhere
from deploy.rehearsal import jobs
from deploy.rehearsal.bridge import Bridge
from deploy.rehearsal.bridge_jobs import Book
from deploy.rehearsal.network import Group
from deploy.rehearsal.stand_ins import (
    CPU_REPLICA_ARGS,
    Command,
    cpu_trainer_args,
    rehearsed_replica,
    replica_substitutes,
    sim_replica_argv,
    substitute,
)
from deploy.rehearsal.starter import STOP_GRACE_S, Starter
from deploy.rehearsal.tunnel import Tunnel
from deploy.specs import JobSpec
from deploy.wheel import build_wheel

POLL_S = 1.0
PROGRESS_S = 30.0  # a progress line at least this often while a wait goes on
TINY_MODEL_TIMEOUT_S = 300.0
DATASET_ROWS = 64
QUIET = (OSError, subprocess.TimeoutExpired)  # what stopping a job that is gone may raise
_LOADED = re.compile(r"adapter (trl-policy-v\d+) loaded on (\d+) replica")


def host_refusal(plan: RunPlan) -> str | None:
    """Why this machine cannot rehearse ``plan``, in one line (None: it can)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return (
            "the rehearsal needs root on Linux (a network namespace per job, bind mounts): run "
            "it as root, or in a throwaway VM or container that allows both"
        )
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("mount", "mount"),
                          ("chroot", "coreutils")):  # fmt: skip
        if shutil.which(tool) is None:
            return f"the rehearsal needs `{tool}` (Debian: {package})"
    if plan.network != "private":
        return (
            "the rehearsal runs the private network (HF's edge cannot be stood in here): drop "
            "--network public, or rehearse the same plan on the private network"
        )
    return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@dataclass
class Rehearsal:
    plan: RunPlan  # as ``deploy up`` would launch it (preflight passed)
    base_python: Path
    workdir: Path
    say: Callable[[str], None]
    steps: int = 2
    ready_timeout_s: float = 900.0
    train_timeout_s: float = 900.0
    fleet: RunPlan | None = None  # a run on a fleet: the fleet's plan, its jobs rehearsed first
    replica_backend: Literal["vllm", "sim"] = "vllm"
    sim_args: tuple[str, ...] = ()  # the simulated replicas' flags (their speed)
    started: list[jobs.LocalJob] = field(default_factory=list)  # the plan's jobs
    book: Book = field(default_factory=Book)  # every job the bridge answers for
    token: str = field(default_factory=lambda: f"hf_rehearsal_{secrets.token_urlsafe(24)}")

    def run(self) -> None:
        refused = host_refusal(self.plan)
        if refused is not None:
            raise DeployError(refused)
        if self.workdir.is_relative_to(self.plan.mount_path):
            raise DeployError(
                f"the rehearsal's folder {self.workdir} is under the plan's mount path "
                f"{self.plan.mount_path}, which every job sees as the bucket: choose a folder "
                "elsewhere (default: one in /var/tmp)"
            )
        group_name = self.plan.network_group or self.plan.run_name
        group = Group(group_name, self.workdir / "hosts")
        tunnel = Tunnel()
        bridge = Bridge(self.book, token=self.token, namespace=self.plan.namespace,
                        group=group_name, say=self.say)  # fmt: skip
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _interrupt) if main else None  # as a Ctrl-C
        try:
            rehearsed = self.stand_ins()
            fleet = self.fleet
            if fleet is not None:  # the same stand-ins: the run's tiny model, the CPU flags
                fleet = replace(fleet, model=rehearsed.model,
                                replica_args=(*fleet.replica_args, *CPU_REPLICA_ARGS))  # fmt: skip
            group.open()
            self.say(f"network: bridge {group.bridge} on {group.subnet}, a namespace per job "
                     f"({group.tag}n2, {group.tag}n3, ...), all removed at the end")  # fmt: skip
            registry = tunnel.start(group.gateway)
            hub = bridge.start(group.gateway)
            self.say(f"hub: the bridge at {hub} (HF_ENDPOINT of every job; the Jobs API only)")
            starter = Starter(self.base_python, self.workdir, group, self.plan.bucket,
                              self.workdir / "bucket", registry, hub, self.say,
                              self.substitutes(rehearsed))  # fmt: skip
            bridge.attach(starter)
            self.launch(rehearsed, starter, fleet)
        except (subprocess.SubprocessError, OSError) as exc:
            raise DeployError(
                f"the rehearsal could not set its jobs up ({exc}): check --image-base (a Python "
                f"with vLLM and torch) and that {self.workdir} can be written"
            ) from None
        finally:
            bridge.close()  # no job starts from here on
            self.say(bridge.summary())
            self.stop(group)
            tunnel.close()
            if main:
                signal.signal(signal.SIGTERM, previous)

    def stand_ins(self) -> RunPlan:
        """The plan with the substitutions the module docstring lists, each said."""
        plan, work = self.plan, self.workdir
        model = work / "model"
        self.say(f"model {plan.model} -> a local tiny model ({model})")
        built = subprocess.run(
            [str(self.base_python), "-m", "trainer_entry.tiny_model", str(model)],
            capture_output=True, text=True, timeout=TINY_MODEL_TIMEOUT_S, check=False,
        )  # fmt: skip
        if built.returncode != 0:
            said = (built.stderr or built.stdout).strip().splitlines()[-1:] or ["no output"]
            raise DeployError(
                f"building the tiny model with {self.base_python} failed ({said[0]}): "
                "--image-base must be the Python of an environment with torch and transformers "
                "(`make e2e-venv`)"
            )
        options = trainer_options(plan)
        data = work / "data.jsonl"
        rows = [
            {
                options.prompt_column: f"What is {i} plus {i}?",
                options.answer_column: f"#### {2 * i}",
            }
            for i in range(DATASET_ROWS)
        ]
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        self.say(
            f"dataset {options.dataset} -> {DATASET_ROWS} local rows with its columns ({data})"
        )
        trainer_args = (*substitute(plan.trainer_args, "--dataset", str(data)),
                        *cpu_trainer_args(self.steps))  # fmt: skip
        recipe = shlex.join(cpu_trainer_args(self.steps))
        self.say(f"trainer: CPU recipe after the planned flags: {recipe}")
        rehearsed = replace(plan, model=str(model), trainer_args=trainer_args,
                            replica_args=(*plan.replica_args, *CPU_REPLICA_ARGS))  # fmt: skip
        if self.sim:
            argv = sim_replica_argv(rehearsed, self.sim_args)
            self.say(f"replicas: the simulated replica for vLLM: {shlex.join(argv)}")
        else:
            self.say(
                f"replicas: vLLM's CPU flags after the planned ones: {shlex.join(CPU_REPLICA_ARGS)}"
            )
        self.say("trainer: online to the rehearsal's Hub (the bridge; its Jobs API only), the "
                 "other jobs offline (HF_HUB_OFFLINE=1)")  # fmt: skip
        return rehearsed

    def replica(self, plan: RunPlan, index: int) -> JobSpec:
        """Replica ``index`` of ``plan`` as rehearsed (vLLM's, or the simulated replica)."""
        return rehearsed_replica(plan, index, self.sim_args if self.sim else None)

    @property
    def sim(self) -> bool:
        return self.replica_backend == "sim"

    def substitutes(self, rehearsed: RunPlan) -> dict[Command, tuple[Command, str]]:
        """What a replica asked for through the bridge runs (``stand_ins.replica_substitutes``)."""
        return replica_substitutes(self.plan, rehearsed, self.sim_args if self.sim else None)

    def launch(self, plan: RunPlan, starter: Starter, fleet: RunPlan | None = None) -> None:
        """``plan``'s jobs; a run on a fleet: ``fleet``'s replicas and proxy job first."""
        served = fleet or plan  # whose replicas and proxy the trainer trains through
        self.publish(plan, starter.bucket_dir)
        if fleet is not None:
            self.publish(fleet, starter.bucket_dir)
        key = secrets.token_urlsafe(REPLICA_KEY_BYTES)  # as `up` makes one
        values = plan.secret_values(self.token, key)

        def start(spec: JobSpec, again: jobs.LocalJob | None = None) -> jobs.LocalJob:
            job = starter.launch(spec, values, again.member if again is not None else None)
            self.started.append(job)
            self.book.record(spec, job)
            return job

        replicas = [start(self.replica(served, i)) for i in range(served.replicas)]
        self.wait(replicas, "/health", key, lambda probe: probe.ok)
        if served.topology == "job":
            proxy = start(proxy_spec(served))
            self.wait([proxy], "/proxy/status", key,
                      lambda probe: routes_everywhere(probe, served.replicas).ok)  # fmt: skip
        trainer, *others = [start(spec) for spec in trainer_specs(plan)]
        if plan.topology == "sidecar":
            self.wait([trainer], "/proxy/status", key,
                      lambda probe: routes_everywhere(probe, plan.replicas).ok)  # fmt: skip
        self.train(trainer, others)
        if served.topology == "job" and not served.shared:
            self.retry_proxy(proxy, lambda: start(proxy.spec, again=proxy), key, served)
        planned = self.planned_specs
        self.say(
            f"rehearsal passed: {len(planned)} job(s) ran as planned. A real launch of this "
            f"plan costs about {cost_per_hour(planned)} while it runs"
        )

    @property
    def planned_specs(self) -> list[JobSpec]:
        """Each job once, in launch order: a retry runs the same job again, not another one."""
        return list({job.spec.name: job.spec for job in self.started}.values())

    def publish(self, plan: RunPlan, bucket: str | Path) -> None:
        bucket = Path(bucket)
        (bucket / plan.run_name).mkdir(parents=True)
        root = source_root()
        if plan.install.source == "wheel" and root is not None:
            self.say(f"building the wheel of {root} into the bucket's {plan.code_dir}")
            build_wheel(root, bucket / plan.code_dir, project_version("wheel"))

    def wait(self, waited: Sequence[jobs.LocalJob], path: str, key: str,
             ready: Callable[..., bool]) -> None:  # fmt: skip
        started = time.monotonic()
        shown = started
        pending = list(waited)
        while pending:
            for job in list(pending):
                self.check_alive(job)
                if ready(get(f"http://{job.member.address}:{PORT}{path}", key, 5.0)):
                    self.say(f"  {job.spec.name}: ready ({path}) after {_since(started)}")
                    pending.remove(job)
            now = time.monotonic()
            if pending and now - started > self.ready_timeout_s:
                raise self.failure(pending[0], f"not ready after {self.ready_timeout_s:.0f} s")
            if pending and now - shown >= PROGRESS_S:
                shown = now
                last = (pending[0].tail(1) or [""])[0][:120]
                self.say(f"  {pending[0].spec.name}: not ready yet ({_since(started)}): {last}")
            time.sleep(POLL_S if pending else 0)

    def train(self, trainer: jobs.LocalJob, others: Sequence[jobs.LocalJob] = ()) -> None:
        """Until trainer node 0 exits; the other nodes must exit 0 too (they end with it)."""
        started = time.monotonic()
        deadline = started + self.train_timeout_s
        shown = started
        seen: set[str] = set()
        while trainer.exit_code() is None:
            if time.monotonic() - shown >= PROGRESS_S:
                shown = time.monotonic()
                self.say(f"  trainer: training ({_since(started)}, {len(seen)} version(s) so far)")
            for job in self.started:
                if job is not trainer and not (job in others and job.exit_code() == 0):
                    self.check_alive(job)
            for name, count in _LOADED.findall(trainer.log_text()):
                if name not in seen:
                    seen.add(name)
                    self.say(f"  trainer: {name} loaded on {count} replica(s)")
            if time.monotonic() > deadline:
                raise self.failure(trainer, f"still training after {self.train_timeout_s:.0f} s")
            time.sleep(POLL_S)
        if trainer.exit_code() != 0:
            raise self.failure(trainer, f"exited with code {trainer.exit_code()}")
        for name, count in _LOADED.findall(trainer.log_text()):
            if name not in seen:
                seen.add(name)
                self.say(f"  trainer: {name} loaded on {count} replica(s)")
        if not seen:
            raise self.failure(trainer, "exited 0 without a single adapter loaded on a replica")
        for node in others:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(STOP_GRACE_S)
            if node.exit_code() != 0:
                raise self.failure(node, f"ended with {node.exit_code()} after node 0 exited 0")
        self.say(f"  trainer: trained {self.steps} step(s) through the proxy and exited 0")

    def retry_proxy(
        self, proxy: jobs.LocalJob, again: Callable[[], jobs.LocalJob], key: str, plan: RunPlan
    ) -> None:
        """The proxy job killed and run again, as HF Jobs retries a job that died: a fresh
        container (its own /tmp), the same command and bucket. It must take its adapter window
        back (its state file in the bucket) and route to every replica again."""
        wanted = _wanted(proxy, key)
        os.killpg(proxy.process.pid, signal.SIGKILL)
        proxy.process.wait(STOP_GRACE_S)
        self.say(f"  {proxy.spec.name}: killed (holding {', '.join(wanted) or 'nothing'}); "
                 "run again as HF Jobs retries a job")  # fmt: skip
        retried = again()
        self.wait([retried], "/proxy/status", key,
                  lambda probe: routes_everywhere(probe, plan.replicas).ok)  # fmt: skip
        back = _wanted(retried, key)
        if not wanted or set(wanted) - set(back):
            raise self.failure(retried, f"took back {back or 'nothing'} of {wanted or 'nothing'}")
        self.say(f"  {proxy.spec.name}: its retry took back {', '.join(back)} from "
                 f"{plan.proxy_state_dir} and routes to every replica")  # fmt: skip

    def check_alive(self, job: jobs.LocalJob) -> None:
        if job.exit_code() is not None and not self.book.cancelled(job):
            raise self.failure(job, f"exited with code {job.exit_code()}")

    def failure(self, job: jobs.LocalJob, what: str) -> DeployError:
        return failed(job.spec.name, what, job.tail(), job.log_path, job.command_ran())

    def stop(self, group: Group) -> None:
        """Every job: the plan's and those started through the bridge."""
        every = [*self.started, *(job.local for job in self.book.all() if job.local)]
        for job in every:
            if job.exit_code() is None:
                with contextlib.suppress(*QUIET):
                    os.killpg(job.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for job in every:
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.process.wait(max(deadline - time.monotonic(), 0.1))
        group.close()  # kills whatever is left in each job's namespace
        for job in every:
            with contextlib.suppress(*QUIET):
                job.process.wait(5)


def failed(
    name: str, what: str, tail: Sequence[str], log_path: Path, command_ran: bool = True
) -> DeployError:
    """A rehearsed job's failure: what happened, the last lines of its log, where all of it is,
    and what to check. Only what the rehearsal saw: whether the job's command began (else this
    machine refused a namespace or mount the rehearsal makes), never a claim about a launch."""
    lines = "\n".join(f"  | {line}" for line in tail)
    if not command_ran:
        return DeployError(
            f"rehearsal failed: {name} {what} before its command began: the rehearsal could not "
            f"make its file system or namespaces here; the last lines of its log:\n{lines}\n"
            f"all of it: {log_path}. Check that root on this machine may make mount namespaces, "
            "tmpfs and bind mounts (the log names the one refused), then rehearse again"
        )
    return DeployError(
        f"rehearsal failed: {name} {what}; the last lines of its log:\n{lines}\n"
        f"all of it: {log_path}. The job ran its planned command here with the rehearsal's "
        "stand-ins (a tiny model and dataset, CPU flags): fix the cause its log shows, then "
        "rehearse again"
    )


def _wanted(proxy: jobs.LocalJob, key: str) -> list[str]:
    """The adapter versions a proxy job wants on its fleet (its ``/proxy/status``)."""
    probe = get(f"http://{proxy.member.address}:{PORT}/proxy/status", key, 5.0)
    adapters = probe.body.get("adapters") if isinstance(probe.body, dict) else None
    wanted = adapters.get("wanted") if isinstance(adapters, dict) else None
    return [str(name) for name in wanted] if isinstance(wanted, list) else []


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.0f} s"
