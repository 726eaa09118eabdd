"""A run as ``deploy up`` plans it (``RunPlan``), decided before anything is launched; its jobs
are ``deploy.plan_jobs``'s pure functions of it.

Layout of a run named R in bucket NS/B, mounted at ``/lora`` in every job (TRL sends absolute
adapter paths, so the mount path must be the same everywhere):

- ``/lora/R/code/``: the project's wheel (``--code wheel``);
- ``/lora/R/``: the trainer's ``--output-dir``; TRL writes adapters to ``/lora/R/.vllm_lora/``.

Replicas mount the bucket read-only; the trainer mounts it writable, and the proxy job too, for
its state file alone (``/lora/R/.proxy-state/``: the adapter window, kept across its retries).
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
bucket (``--resume auto``) and its adapter names continue; a proxy job run again takes its
adapter window back from its state file in the bucket (``--state-dir``) and the replicas.

Adapter push (``adapter_push``, on unless ``deploy up --no-adapter-push``): every replica runs
the adapter receiver inside vLLM and every proxy pushes (the sidecar, or the trainer's relay and
the proxy job), so a sync does not wait for the bucket mount; the flags are written out in each
command, so ``--dry-run`` shows them. Off: replicas without a receiver, proxies that only load
from the mount.

A fleet that sizes itself (``scale``, ``deploy up --replica-count MIN..MAX``): the run starts
with MIN replicas, and the scaler in the trainer job (``deploy.scaler``) adds and retires
replica jobs within the range and the budget. Its configuration travels in the trainer job's
environment (``deploy.scaler.config``); the trainer job also gets the replicas' key (the
secrets a replica job is launched with) and the proxy's admin key (``PROXY_ADMIN_KEY``, derived
from the HF token as a fleet's is: the sidecar, or the proxy job, which gets it too, enables its
admin API with it; the scaler drains replicas and reports its decisions there). Each replica
job also claims the alias ``replica-<index>`` (``JobSpec.numbered``), so the scaler maps every
job to the address the proxy routes to. Private network only.

Shared fleets (``deploy fleet up``, ``shared``): a fleet named F is a run of replicas and a proxy
job only, its proxy serving many runs at ``/runs/<run>`` with an admin key derived from the
user's HF token (``deploy.keys``). A run R on it (``deploy up --fleet F``, ``fleet``) is its
trainer jobs alone, in F's network group (alias ``R-trainer``), writing to ``/lora/R/`` of the
same bucket, pointed at ``http://proxy:8000/runs/R``; the trainer declares R on the proxy with
the same key and removes it when it ends. Every job of both carries ``rollout-fleet: F``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from deploy.durations import format_duration
from deploy.install import VLLM_IMAGE, Expanded, Install
from deploy.keys import fleet_key
from deploy.scaler.config import Scaling
from deploy.specs import (
    FLEET_LABEL,
    INDEX_LABEL,
    REPLICAS_LABEL,
    ROLE_LABEL,
    RUN_LABEL,
    BucketMount,
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
    scale: Scaling | None = None  # the fleet sizes itself within these bounds (None: fixed)

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
        names = self._secrets(role)
        if self.scale is None or role == "replica":
            return names
        # The scaler (trainer) launches replicas with theirs and uses the proxy's admin API.
        extra = self._secrets("replica") if role == "trainer" else ()
        return tuple(dict.fromkeys((*names, *extra, ADMIN_KEY_SECRET)))

    def _secrets(self, role: Role) -> tuple[str, ...]:
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
    def proxy_state_dir(self) -> str:
        """Where the proxy job keeps its adapter window (``--state-dir``), in the bucket."""
        return f"{self.run_dir}/.proxy-state"

    @property
    def scaler_state_dir(self) -> str:
        """Where the scaler keeps its history and its launches, in the bucket."""
        return f"{self.run_dir}/.scaler"

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
