"""The jobs of a run, as pure functions of one ``RunPlan``.

Layout of a run named R in bucket NS/B, mounted at ``/lora`` in every job (TRL sends absolute
adapter paths, so the mount path must be the same everywhere):

- ``/lora/R/code/``: the project's wheel (``--code wheel``);
- ``/lora/R/``: the trainer's ``--output-dir``; TRL writes adapters to ``/lora/R/.vllm_lora/``.

Replicas (and the proxy job) mount the bucket read-only; only the trainer mounts it writable.
Every job runs in ``namespace`` (by default the bucket's), where the proxy job also discovers
replacement replicas. A job launched before the trainer must outlive it: its lifetime is the
trainer's plus the longest the launcher may wait before the trainer starts (``ready_timeout_s``
per wave still to come).
Topology ``sidecar``: the trainer job runs the proxy beside it. Topology ``job``: the proxy is a
job of its own and the trainer is pointed at it.

Network ``private`` (the default): every job of the run joins the network group named after the
run (``run_job(network_group=)``); replicas claim the alias ``replica``, the proxy job ``proxy``,
the trainer ``trainer``, and inside the group ``${HF_NETWORK_GROUP_PREFIX}<alias>`` resolves to
the jobs claiming it. The proxy (the sidecar, or the proxy job) finds the replicas by resolving
their alias again and again (``--discover dns:...``): a replica job run again, at a new address,
rejoins without anyone restarting the proxy. It talks plain HTTP to them on port 8000 with a key
made for the run (``VLLM_API_KEY``, a secret of the replicas and of the proxy's job: never the
user's HF token, never on a command line), and the trainer reaches the proxy job at its alias.
The exposed ports stay, for watching the run (``deploy status``, ``top``) through HF's edge.
Network ``public``: every hop crosses HF's edge: the proxy reaches each replica's exposed URL
with the HF token the edge demands (so the replicas' receivers take the explicit opt-in
``--receiver-without-key``: the edge checks that token), and the trainer the proxy job's.

Retries (``attempts``, 3 by default, ``run_job(attempts=)``): HF Jobs runs a failed job again,
up to ``attempts`` runs in all (``JobInfo.retry``: the runs it may add). The run is built to
survive that: a replica run again comes back empty, and the proxy, which health-checks every
replica, pushes the adapter window into it before it takes traffic (the proxy job also finds
replica jobs by label); a trainer run again resumes from its newest complete checkpoint in the
bucket (``--resume auto``) and its adapter names continue; a proxy job run again rebuilds its
state from the replicas and the bucket.

Adapter push (``adapter_push``, on unless ``deploy up --no-adapter-push``): every replica runs
the adapter receiver inside vLLM and every proxy pushes (the sidecar, or the trainer's relay and
the proxy job), so a sync does not wait for the bucket mount; the flags are written out in each
command, so ``--dry-run`` shows them. Off: replicas without a receiver, proxies that only load
from the mount.

Shared fleets (``deploy fleet up``, ``shared``): a fleet named F is a run of replicas and a proxy
job only, its proxy serving many runs at ``/runs/<run>`` with an admin key derived from the
user's HF token (``deploy.keys``). A run R on it (``deploy up --fleet F``, ``fleet``) is its
trainer jobs alone, in F's network group (alias ``R-trainer``), writing to ``/lora/R/`` of the
same bucket, pointed at ``http://proxy:8000/runs/R``; the trainer declares R on the proxy with
the same key and removes it when it ends. Every job of both carries ``rollout-fleet: F``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from deploy.durations import format_duration
from deploy.install import VLLM_IMAGE, Expanded, Install
from deploy.keys import fleet_key
from deploy.specs import (
    FLEET_LABEL,
    INDEX_LABEL,
    REPLICAS_LABEL,
    ROLE_LABEL,
    RUN_LABEL,
    BucketMount,
    GroupMember,
    JobSpec,
    Role,
)

Topology = Literal["sidecar", "job"]
Network = Literal["private", "public"]
PORT = 8000
TOKEN_SECRET = "HF_TOKEN"
UPSTREAM_TOKEN_SECRET = "PROXY_UPSTREAM_TOKEN"
ADMIN_KEY_SECRET = "PROXY_ADMIN_KEY"  # a fleet's proxy job: its admin API's key
FLEET_KEY_SECRET = "FLEET_ADMIN_KEY"  # a run on a fleet: the same key, to declare itself
REPLICA_KEY_SECRET = "VLLM_API_KEY"  # the run's replica key, where the replicas' vLLM reads it
NETWORK_PREFIX = "HF_NETWORK_GROUP_PREFIX"  # set by HF Jobs inside every member of a group


def alias_address(alias: str) -> Expanded:
    """The host name that resolves, inside the run's network group, to the jobs claiming
    ``alias`` (the job's shell expands it)."""
    return Expanded(f"${{{NETWORK_PREFIX}}}{alias}")


@dataclass(frozen=True)
class Images:
    replica: str = VLLM_IMAGE
    # TRL's rollout worker needs vLLM beside torch: the trainer runs on the same image.
    trainer: str = VLLM_IMAGE
    proxy: str = "python:3.11-slim"


@dataclass(frozen=True)
class Flavors:
    replica: str = "h200"
    trainer: str = "h200x2"  # the published run: two FSDP2 ranks (trainer_entry uses every GPU)
    proxy: str = "cpu-upgrade"


def gpu_count(flavor: str) -> int:
    """GPUs of a flavor by its name: ``h200x4`` has 4, ``h200`` or ``cpu-basic`` at most 1."""
    match = re.search(r"x(\d+)$", flavor)
    return int(match.group(1)) if match else 1


@dataclass(frozen=True)
class RunPlan:
    """Everything ``deploy up`` launches, decided before anything is launched."""

    run_name: str
    bucket: str
    model: str
    replicas: int
    install: Install
    namespace: str
    topology: Topology = "sidecar"
    images: Images = field(default_factory=Images)
    flavors: Flavors = field(default_factory=Flavors)
    timeout_s: int = 6 * 3600  # the trainer's lifetime
    ready_timeout_s: float = 1800.0  # the longest wait for one wave of jobs
    mount_path: str = "/lora"
    replica_args: tuple[str, ...] = ()
    trainer_args: tuple[str, ...] = ()
    adapter_push: bool = True
    attempts: int = 3  # every job's runs in all: HF Jobs retries a failed one (module docstring)
    network: Network = "private"
    trainer_nodes: int = 1  # trainer jobs; node 0 runs the proxy side, all meet at its alias
    # Shared fleets (``deploy.fleet``): ``shared``, this plan is a fleet (replicas and a proxy
    # job serving many runs, named ``run_name``); ``fleet``, this run's trainer joins that fleet
    # with ``run_weight``.
    shared: bool = False
    fleet: str | None = None
    run_weight: float = 1.0

    @property
    def replica_env(self) -> dict[str, str]:
        return {"PYTHONUNBUFFERED": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}

    @property
    def private(self) -> bool:
        return self.network == "private"

    @property
    def network_group(self) -> str | None:
        """The run's network group: its name, or its fleet's (names fit the group's rules)."""
        return (self.fleet or self.run_name) if self.private else None

    def alias(self, role: Role) -> str:
        """The alias a role claims in the group: a run on a fleet shares the group with other
        runs' trainers, so its own are ``<run>-trainer``."""
        return f"{self.run_name}-trainer" if role == "trainer" and self.fleet else role

    def secrets(self, role: Role) -> tuple[str, ...]:
        """The secret names a job gets (``secret_values`` says what each holds)."""
        if role == "proxy":
            names = (
                (UPSTREAM_TOKEN_SECRET,) if self.private else (TOKEN_SECRET, UPSTREAM_TOKEN_SECRET)
            )
            return (*names, ADMIN_KEY_SECRET) if self.shared else names
        if role == "trainer" and self.fleet:
            return (TOKEN_SECRET, FLEET_KEY_SECRET)
        private_sidecar = self.private and (role == "replica" or self.topology == "sidecar")
        # The HF token stays with replicas and trainer: it reads gated models and datasets.
        return (TOKEN_SECRET, REPLICA_KEY_SECRET) if private_sidecar else (TOKEN_SECRET,)

    def secret_values(self, hf_token: str, replica_key: str) -> dict[str, str]:
        """What each secret name holds: the proxy sends the run's replica key upstream on the
        private network, the HF token the edge demands on the public one; a fleet's admin key
        is derived from the HF token (``fleet_key``), never stored."""
        admin = fleet_key(hf_token, self.fleet or self.run_name)
        return {
            TOKEN_SECRET: hf_token,
            REPLICA_KEY_SECRET: replica_key,
            UPSTREAM_TOKEN_SECRET: replica_key if self.private else hf_token,
            ADMIN_KEY_SECRET: admin,
            FLEET_KEY_SECRET: admin,
        }

    @property
    def trainer_secrets(self) -> tuple[str, ...]:
        return self.secrets("trainer")

    @property
    def replica_discovery(self) -> Expanded:
        """``--discover`` for the replicas on the private network: their alias, port 8000."""
        return Expanded(f"dns:{alias_address('replica')}:{PORT}")

    @property
    def push_flag(self) -> str:
        """The proxy's flag for ``adapter_push``."""
        return "--adapter-push" if self.adapter_push else "--no-adapter-push"

    @property
    def run_dir(self) -> str:
        return f"{self.mount_path}/{self.run_name}"

    @property
    def adapters_dir(self) -> str:
        return f"{self.run_dir}/.vllm_lora"

    @property
    def code_dir(self) -> str:
        """Where the wheel sits in the bucket (``code_dir_in_job`` inside the jobs)."""
        return f"{self.run_name}/code"

    @property
    def code_dir_in_job(self) -> str:
        return f"{self.run_dir}/code"

    def job_name(self, role: Role, index: int | None = None) -> str:
        return f"{self.run_name}-{role}" + ("" if index is None else f"-{index}")

    def labels(self, role: Role, index: int | None = None) -> dict[str, str]:
        labels = {RUN_LABEL: self.run_name, ROLE_LABEL: role}
        if self.shared or self.fleet:
            labels[FLEET_LABEL] = self.fleet or self.run_name
        if role == "replica":
            labels[REPLICAS_LABEL] = self.run_name
        if index is not None:
            labels[INDEX_LABEL] = str(index)
        return labels

    def mount(self, *, writable: bool = False) -> BucketMount:
        return BucketMount(self.bucket, self.mount_path, read_only=not writable)

    def timeout(self, role: Role) -> str:
        """The job's lifetime: the trainer's, plus, for a job launched before the trainer, the
        waits that may come between its launch and the trainer's."""
        waits = {"replica": 2 if self.topology == "job" else 1, "proxy": 1, "trainer": 0}[role]
        return format_duration(self.timeout_s + int(waits * self.ready_timeout_s))


def exposed_url_placeholder(job_name: str) -> str:
    """Stands for a job's exposed URL before the job exists (``--dry-run``)."""
    return f"https://<{job_name} job id>--{PORT}.hf.jobs"


def replica_argv(plan: RunPlan) -> list[str]:
    return [
        *("python3", "-m", "replica_entry", "--backend", "vllm"),
        *("--host", "0.0.0.0", "--port", str(PORT), "--model", plan.model),
        "--adapter-receiver" if plan.adapter_push else "--no-adapter-receiver",
        # Public: behind HF Jobs' exposed port, which checks the HF token on every request (one
        # Authorization header cannot carry a second key): the receiver's explicit opt-in.
        # Private: the run's key ($VLLM_API_KEY) guards vLLM and the receiver alike.
        *(("--receiver-without-key",) if plan.adapter_push and not plan.private else ()),
        *plan.replica_args,
    ]


def network_of(plan: RunPlan, role: Role, claims: bool = True) -> GroupMember | None:
    """The job's place in the run's network group, claiming its role as alias unless not
    ``claims`` (none on the public network)."""
    group = plan.network_group
    return None if group is None else GroupMember(group, (plan.alias(role),) if claims else ())


def replica_spec(plan: RunPlan, index: int) -> JobSpec:
    return JobSpec(
        name=plan.job_name("replica", index),
        role="replica",
        image=plan.images.replica,
        command=plan.install.wrap_into_image(replica_argv(plan), "replica"),
        flavor=plan.flavors.replica,
        timeout=plan.timeout("replica"),
        volumes=(plan.mount(),),
        labels=plan.labels("replica", index),
        env=plan.replica_env,
        secret_names=plan.secrets("replica"),
        expose=(PORT,),
        attempts=plan.attempts,
        network=network_of(plan, "replica"),
    )


def proxy_spec(plan: RunPlan, replica_urls: Sequence[str] = ()) -> JobSpec:
    """The proxy job: finding the replicas at their alias (private), else starting from
    ``replica_urls`` and finding replacements through the Jobs API (a new job, a new URL)."""
    if plan.private:
        where: list[str] = ["--discover", plan.replica_discovery]
    else:
        where = [
            *("--replicas", ",".join(replica_urls)),
            *("--discover", f"hf-jobs:{REPLICAS_LABEL}={plan.run_name}"),
            *("--discover-namespace", plan.namespace),
        ]
    argv = [
        *("python3", "-m", "proxy", "--host", "0.0.0.0", "--port", str(PORT)),
        *where,
        # A fleet's proxy takes each run's adapters from that run's relay (push or its load's
        # path in the bucket), no one directory of its own to watch.
        *(() if plan.shared else ("--adapters-dir", plan.adapters_dir)),
        "--supervise",  # a proxy that dies comes back on the same port within seconds
        plan.push_flag,
    ]
    return JobSpec(
        name=plan.job_name("proxy"),
        role="proxy",
        image=plan.images.proxy,
        command=plan.install.wrap(argv),
        flavor=plan.flavors.proxy,
        timeout=plan.timeout("proxy"),
        volumes=(plan.mount(),),
        labels=plan.labels("proxy"),
        env={"PYTHONUNBUFFERED": "1"},
        secret_names=plan.secrets("proxy"),
        expose=(PORT,),
        attempts=plan.attempts,
        network=network_of(plan, "proxy"),
    )


def trainer_argv(
    plan: RunPlan,
    *,
    replica_urls: Sequence[str] = (),
    proxy_url: str | None = None,
    node: int = 0,
) -> list[str]:
    """Trainer node ``node``'s command: beside its own proxy (``replica_urls``) or pointed at
    ``proxy_url``; with neither, the planned one with exposed URLs as placeholders. On the
    private network neither is needed: the aliases are known before any job exists. With
    several nodes, every one meets node 0 at the ``trainer`` alias (torch's rendezvous)."""
    if plan.private:
        target = _private_target(plan)
    else:
        target = _public_target(plan, replica_urls, proxy_url)
    target.append(f"--proxy-arg={plan.push_flag}")  # the sidecar, or the relay
    world: list[str] = []
    if plan.trainer_nodes > 1:
        world = [
            *("--nnodes", str(plan.trainer_nodes), "--node-rank", str(node)),
            *("--master-addr", alias_address(plan.alias("trainer"))),
        ]
    return [
        *("python3", "-m", "trainer_entry", "--model", plan.model),
        # One FSDP2 rank per GPU of the flavor (what trainer_entry detects; written out to show).
        *("--num-processes", str(gpu_count(plan.flavors.trainer))),
        *world,
        *target,
        *("--output-dir", plan.run_dir),
        *plan.trainer_args,
    ]


def _private_target(plan: RunPlan) -> list[str]:
    if plan.fleet:  # its fleet's proxy job, under the run's own path, declared by the trainer
        return [
            *(
                "--proxy-url",
                Expanded(f"http://{alias_address('proxy')}:{PORT}/runs/{plan.run_name}"),
            ),
            *("--fleet-key-env", FLEET_KEY_SECRET, "--run-weight", f"{plan.run_weight:g}"),
        ]
    if plan.topology == "job":
        return ["--proxy-url", Expanded(f"http://{alias_address('proxy')}:{PORT}")]
    return [
        *("--sidecar-discover", plan.replica_discovery, "--replica-token-env", REPLICA_KEY_SECRET),
        *("--sidecar-host", "0.0.0.0", "--sidecar-port", str(PORT)),
    ]


def _public_target(plan: RunPlan, replica_urls: Sequence[str], proxy_url: str | None) -> list[str]:
    if not replica_urls and proxy_url is None:
        replicas = [
            exposed_url_placeholder(plan.job_name("replica", i)) for i in range(plan.replicas)
        ]
        if plan.topology == "sidecar":
            replica_urls = replicas
        else:
            proxy_url = exposed_url_placeholder(plan.job_name("proxy"))
    if proxy_url is not None:
        target = ["--proxy-url", proxy_url, "--proxy-token-env", TOKEN_SECRET]
    else:
        target = [
            *("--sidecar-replicas", ",".join(replica_urls), "--replica-token-env", TOKEN_SECRET),
            *("--sidecar-host", "0.0.0.0", "--sidecar-port", str(PORT)),
        ]
    return target


def trainer_spec(
    plan: RunPlan,
    *,
    replica_urls: Sequence[str] = (),
    proxy_url: str | None = None,
    node: int = 0,
) -> JobSpec:
    """Trainer node ``node``: beside its own proxy (``replica_urls``) or pointed at
    ``proxy_url``; node 0 alone runs that proxy side and claims the ``trainer`` alias.

    The sidecar proxy listens on the exposed port, so ``deploy up`` and ``deploy status`` can
    see whether it routes to the replicas; TRL talks to it on 127.0.0.1.
    """
    argv = trainer_argv(plan, replica_urls=replica_urls, proxy_url=proxy_url, node=node)
    return JobSpec(
        name=plan.job_name("trainer", node or None),
        role="trainer",
        image=plan.images.trainer,
        command=plan.install.wrap_into_image(argv, "trainer"),
        flavor=plan.flavors.trainer,
        timeout=plan.timeout("trainer"),
        volumes=(plan.mount(writable=True),),
        labels=plan.labels("trainer", node or None),
        env={"PYTHONUNBUFFERED": "1"},
        secret_names=plan.trainer_secrets,
        expose=(PORT,) if plan.topology == "sidecar" and node == 0 else (),
        attempts=plan.attempts,
        network=network_of(plan, "trainer", claims=node == 0),
    )


def trainer_specs(
    plan: RunPlan, *, replica_urls: Sequence[str] = (), proxy_url: str | None = None
) -> list[JobSpec]:
    """Every trainer node of the run, node 0 first."""
    return [
        trainer_spec(plan, replica_urls=replica_urls, proxy_url=proxy_url, node=node)
        for node in range(plan.trainer_nodes)
    ]


def dry_run_specs(plan: RunPlan) -> list[JobSpec]:
    """Every job of the run in launch order, exposed URLs shown as placeholders."""
    if plan.fleet:  # a run on a fleet: its trainer only
        return trainer_specs(plan)
    replicas = [replica_spec(plan, index) for index in range(plan.replicas)]
    if plan.topology == "sidecar":
        return [*replicas, *trainer_specs(plan)]
    proxy = proxy_spec(plan, [exposed_url_placeholder(spec.name) for spec in replicas])
    return [*replicas, proxy, *(() if plan.shared else trainer_specs(plan))]
