"""A job spec between the Jobs API's wire form (the camelCase body ``run_job`` sends, see
``deploy.rehearsal.hub_wire``) and deploy's ``JobSpec``, for the rehearsal's bridge.

``wire_spec`` writes a ``JobSpec`` as ``HfApi.run_job(**spec.run_job_kwargs(...))`` sends it
(what the bridge lists for the plan's own jobs), secrets by name only. ``job_spec`` reads a body
back into a ``JobSpec`` and the secrets' values, or raises ``Refused`` with one line saying what
the rehearsal cannot run and what to send instead: it starts the run's own kind of job only, one
whose labels name its role (``rollout-role``: replica, proxy or trainer, as deploy labels them),
which mounts exactly one bucket, and joins a network group (the rehearsal has one: the bridge
checks which). Which image it can stand in for and which bucket it has are the starter's to say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deploy.specs import ROLE_LABEL, ROLES, BucketMount, GroupMember, JobSpec, Role

TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # the client's (``_create_job_spec``)


class Refused(ValueError):
    """A spec the rehearsal cannot start; the message says why and what to send."""


def timeout_seconds(timeout: str) -> int:
    """A ``JobSpec.timeout`` (``6h``, ``90m``, ``300``) in seconds, as the client converts it."""
    if timeout and timeout[-1] in TIME_UNITS:
        return int(float(timeout[:-1]) * TIME_UNITS[timeout[-1]])
    return int(timeout)


def wire_spec(spec: JobSpec) -> dict[str, Any]:
    """``spec`` as ``run_job`` sends it, each secret's value left out (None)."""
    body: dict[str, Any] = {
        "command": list(spec.command),
        "arguments": [],
        "environment": dict(spec.env),
        "flavor": spec.flavor,
        "dockerImage": spec.image,
        "labels": {**spec.labels, "name": spec.name},
        "volumes": [
            {
                "type": "bucket",
                "source": mount.source,
                "mountPath": mount.mount_path,
                "readOnly": mount.read_only,
            }
            for mount in spec.volumes
        ],
        "attempts": spec.attempts,
    }
    if spec.secret_names:
        body["secrets"] = dict.fromkeys(spec.secret_names)
    if spec.timeout:
        body["timeoutSeconds"] = timeout_seconds(spec.timeout)
    if spec.expose:
        body["expose"] = {"ports": list(spec.expose)}
    if spec.network is not None:
        network: dict[str, Any] = {"group": spec.network.group}
        if spec.network.aliases:
            network["aliases"] = list(spec.network.aliases)
        body["network"] = network
    return body


def _strings(body: Mapping[str, Any], key: str) -> dict[str, str]:
    value = body.get(key) or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise Refused(f"{key} must map names to strings")
    return dict(value)


def _mount(body: Mapping[str, Any]) -> BucketMount:
    volumes = body.get("volumes") or []
    if not isinstance(volumes, list) or len(volumes) != 1 or not isinstance(volumes[0], dict):
        raise Refused(
            "a rehearsed job mounts exactly one volume, the run's bucket (as deploy's jobs do): "
            "send volumes=[Volume(type='bucket', source=<the plan's bucket>, mount_path=...)]"
        )
    volume = volumes[0]
    source, path = volume.get("source"), volume.get("mountPath")
    if volume.get("type") != "bucket" or not isinstance(source, str) or not isinstance(path, str):
        raise Refused("the volume must be a bucket with a source and a mount path")
    return BucketMount(source, path, bool(volume.get("readOnly")))


def job_spec(body: Mapping[str, Any]) -> tuple[JobSpec, dict[str, str]]:
    """The ``JobSpec`` a ``run_job`` body describes, and its secrets' values (``Refused``: see
    the module docstring). The body passed ``hub_wire.spec_refusal`` already."""
    labels = _strings(body, "labels")
    role = labels.get(ROLE_LABEL)
    if role not in ROLES:
        raise Refused(
            f"the rehearsal starts its run's own jobs: label {ROLE_LABEL} must be one of "
            f"{', '.join(ROLES)} (deploy's labels; got {role or 'none'})"
        )
    image, command = body.get("dockerImage"), body.get("command")
    if not isinstance(image, str):
        raise Refused("the rehearsal runs Docker images it has a stand-in for, not Spaces")
    arguments = body.get("arguments") or []
    words = [*(command or []), *arguments] if isinstance(arguments, list) else []
    if not words or not all(isinstance(word, str) for word in words):
        raise Refused("command must be a list of strings")
    network = body.get("network")
    if not isinstance(network, dict):
        raise Refused(
            "a rehearsed job joins the run's network group (network_group=, as deploy's jobs)"
        )
    ports = (body.get("expose") or {}).get("ports") or []
    timeout = body.get("timeoutSeconds")
    secrets = _strings(body, "secrets")
    spec = JobSpec(
        name=labels.get("name") or "job",
        role=_role(role),
        image=image,
        command=tuple(words),
        flavor=str(body.get("flavor") or "cpu-basic"),
        timeout=f"{timeout}s" if isinstance(timeout, int) else "",
        volumes=(_mount(body),),
        labels={key: value for key, value in labels.items() if key != "name"},
        env=_strings(body, "environment"),
        secret_names=tuple(secrets),
        expose=tuple(port for port in ports if isinstance(port, int)),
        attempts=int(body.get("attempts") or 1),
        network=GroupMember(network["group"], tuple(network.get("aliases") or ())),
    )
    return spec, secrets


def _role(role: str) -> Role:
    for known in ROLES:
        if known == role:
            return known
    raise Refused(f"no role {role}")
