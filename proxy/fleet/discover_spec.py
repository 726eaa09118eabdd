"""What ``--discover`` names (``proxy.fleet.discovery`` looks it up); imported by ``proxy.config``
to check the flag, so it imports nothing of the proxy."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobsLabel:
    """``hf-jobs:LABEL=VALUE``: the RUNNING jobs carrying that label, by their exposed URLs."""

    label: str
    value: str


@dataclass(frozen=True)
class DnsName:
    """``dns:NAME:PORT``: every address NAME resolves to, over plain HTTP on PORT (an HF Jobs
    network group's alias: ``${HF_NETWORK_GROUP_PREFIX}replica``)."""

    name: str
    port: int


DISCOVER_FORMS = "hf-jobs:LABEL=VALUE or dns:NAME:PORT"


def parse_discover_spec(spec: str) -> JobsLabel | DnsName:
    """``--discover`` -> what to look up; ValueError naming what is wrong."""
    kind, _, selector = spec.partition(":")
    if kind == "hf-jobs":
        label, _, value = selector.partition("=")
        if label and value:
            return JobsLabel(label, value)
    elif kind == "dns":
        name, _, port = selector.rpartition(":")
        name = name.strip("[]")
        if name and port.isdigit() and 0 < int(port) <= 65535 and name.isprintable():
            return DnsName(name, int(port))
    raise ValueError(f"--discover {spec!r} must look like {DISCOVER_FORMS}")
