"""What one job of a run is: image, command, hardware, mounts, ports and labels.

A ``JobSpec`` holds secret *names* only. Their values (the HF token, the run's replica key) are
joined in at launch time by ``run_job_kwargs`` and never stored in a spec, so printing or logging
a spec cannot leak them; nor can its data form (``as_data``/``of_data``), which is how the
scaler in the trainer job gets the replicas' spec (``deploy.scaler.config``).

A replica job is numbered: its name ends in ``-<index>``, its ``rollout-index`` label says the
index, and on a run whose fleet sizes itself it also claims the alias ``replica-<index>`` in the
run's network group (``numbered``), so the scaler finds each job's address by its own alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from huggingface_hub import Volume

Role = Literal["replica", "proxy", "trainer"]
ROLES: tuple[Role, ...] = ("replica", "proxy", "trainer")

RUN_LABEL = "rollout-run"
ROLE_LABEL = "rollout-role"
INDEX_LABEL = "rollout-index"
REPLICAS_LABEL = "rollout-replicas"  # on replica jobs only: what the proxy job discovers
FLEET_LABEL = "rollout-fleet"  # a shared fleet's jobs, and the trainer jobs of the runs on it
SCALED_LABEL = "rollout-scaled"  # replica jobs the scaler launched (value: the run's name)
MASK = "***"


def replica_alias(index: int) -> str:
    """The alias replica job ``index`` claims besides ``replica`` when the fleet sizes itself."""
    return f"replica-{index}"


@dataclass(frozen=True)
class BucketMount:
    """A Storage Bucket mounted into a job's container."""

    source: str
    mount_path: str
    read_only: bool

    def volume(self) -> Volume:
        return Volume(
            type="bucket", source=self.source, mount_path=self.mount_path, read_only=self.read_only
        )

    def describe(self) -> dict[str, Any]:
        return {
            "type": "bucket",
            "source": self.source,
            "mount_path": self.mount_path,
            "read_only": self.read_only,
        }


@dataclass(frozen=True)
class GroupMember:
    """A job's place in an HF Jobs network group: the group, and the aliases it claims there
    (``${HF_NETWORK_GROUP_PREFIX}<alias>`` resolves to every member claiming it)."""

    group: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """One job as ``HfApi.run_job`` will receive it (minus secret values)."""

    name: str
    role: Role
    image: str
    command: tuple[str, ...]
    flavor: str
    timeout: str
    volumes: tuple[BucketMount, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)
    secret_names: tuple[str, ...] = ()
    expose: tuple[int, ...] = ()
    attempts: int = 1  # HF Jobs runs a failed job again, up to this many runs in all
    network: GroupMember | None = None

    def describe(self, namespace: str) -> dict[str, Any]:
        """The ``--dry-run`` view: every field, secret values masked, and where it would run."""
        return {
            "name": self.name,
            "namespace": namespace,
            "role": self.role,
            "image": self.image,
            "command": list(self.command),
            "env": dict(self.env),
            "secrets": {name: MASK for name in self.secret_names},
            "flavor": self.flavor,
            "timeout": self.timeout,
            "volumes": [mount.describe() for mount in self.volumes],
            "expose": list(self.expose),
            "labels": dict(self.labels),
            "attempts": self.attempts,
            "network_group": self.network.group if self.network else None,
            "network_aliases": list(self.network.aliases) if self.network else [],
        }

    def as_data(self) -> dict[str, Any]:
        """The spec as JSON-able data, secret names only (``of_data`` reads it back)."""
        return {
            "name": self.name,
            "role": self.role,
            "image": self.image,
            "command": list(self.command),
            "flavor": self.flavor,
            "timeout": self.timeout,
            "volumes": [mount.describe() for mount in self.volumes],
            "labels": dict(self.labels),
            "env": dict(self.env),
            "secret_names": list(self.secret_names),
            "expose": list(self.expose),
            "attempts": self.attempts,
            "network": None
            if self.network is None
            else {"group": self.network.group, "aliases": list(self.network.aliases)},
        }

    @classmethod
    def of_data(cls, data: Mapping[str, Any]) -> JobSpec:
        """The spec ``as_data`` wrote (``KeyError``/``TypeError`` for anything else)."""
        network = data["network"]
        return cls(
            name=str(data["name"]),
            role=data["role"],
            image=str(data["image"]),
            command=tuple(str(word) for word in data["command"]),
            flavor=str(data["flavor"]),
            timeout=str(data["timeout"]),
            volumes=tuple(
                BucketMount(v["source"], v["mount_path"], bool(v["read_only"]))
                for v in data["volumes"]
            ),
            labels={str(k): str(v) for k, v in dict(data["labels"]).items()},
            env={str(k): str(v) for k, v in dict(data["env"]).items()},
            secret_names=tuple(str(name) for name in data["secret_names"]),
            expose=tuple(int(port) for port in data["expose"]),
            attempts=int(data["attempts"]),
            network=None
            if network is None
            else GroupMember(str(network["group"]), tuple(map(str, network["aliases"]))),
        )

    def numbered(self, run_name: str, index: int, *, scaling: bool) -> JobSpec:
        """This replica spec as replica job ``index`` of run ``run_name``: its name, its
        ``rollout-index`` label and, when the fleet sizes itself, its own alias."""
        network = self.network
        if network is not None:
            aliases = ("replica", replica_alias(index)) if scaling else ("replica",)
            network = GroupMember(network.group, aliases)
        labels = {**self.labels, INDEX_LABEL: str(index)}
        return replace(self, name=f"{run_name}-replica-{index}", labels=labels, network=network)

    def run_job_kwargs(self, secrets: Mapping[str, str], namespace: str) -> dict[str, Any]:
        """Keyword arguments for ``HfApi.run_job``, each secret name with its value in
        ``secrets`` (``KeyError`` for one it lacks: a bug of the caller)."""
        return {
            "image": self.image,
            "command": list(self.command),
            "env": dict(self.env),
            "secrets": {name: secrets[name] for name in self.secret_names},
            "flavor": self.flavor,
            "timeout": self.timeout,
            "name": self.name,
            "labels": dict(self.labels),
            "volumes": [mount.volume() for mount in self.volumes],
            "expose": list(self.expose) or None,
            "attempts": self.attempts,
            "network_group": self.network.group if self.network else None,
            "network_aliases": list(self.network.aliases or ()) or None if self.network else None,
            "namespace": namespace,
        }
