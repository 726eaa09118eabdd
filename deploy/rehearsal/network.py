"""The run's network group on this machine: one network namespace per job on one bridge.

Each job gets a namespace of its own (its own loopback and ports, as a job has its own machine)
with one address on a bridge the rehearsal creates, and a hosts file bind-mounted over its
``/etc/hosts`` that answers as the group's DNS does: ``${HF_NETWORK_GROUP_PREFIX}<alias>`` to
every member claiming the alias, ``$HF_NETWORK_GROUP_HOSTNAME`` to every member, and each job's
name (its host name) to its own address. The file is
rewritten in place as members join (a bind mount keeps following the same file). The jobs'
only way out is ``Tunnel``: a CONNECT relay on the bridge that takes any ``host:443`` (HTTPS,
``HTTPS_PROXY``, ``deploy.rehearsal.tunnel``), as pip in a job reaches PyPI.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from deploy.errors import DeployError

IP_TIMEOUT_S = 30.0  # one ``ip`` command
SUBNET = ipaddress.ip_network("10.231.0.0/16")  # a /24 of it per rehearsal, chosen at random
MAX_MEMBERS = 200
TAG_TRIES = 16  # random tags tried for a bridge name and /24 no one on this machine uses


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    _run([*prefix, "ip", *args])


def _run(argv: list[str]) -> None:
    """One ``ip`` command; a ``DeployError`` naming it and what it said if it fails."""
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or exc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise DeployError(
            f"the rehearsal could not build its network: `{shlex.join(argv)}` failed "
            f"({said[0]}): it needs root on a host that allows network namespaces and bridges"
        ) from None


@dataclass(frozen=True)
class Member:
    job_name: str
    netns: str
    address: str
    aliases: tuple[str, ...]


@dataclass
class Group:
    """The group ``name``: its bridge, its members and their hosts file."""

    name: str
    hosts_file: Path
    prefix: str = ""
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    members: list[Member] = field(default_factory=list)
    subnet: ipaddress.IPv4Network | None = None
    links: list[str] = field(default_factory=list)  # what this group created, deleted by close

    @property
    def bridge(self) -> str:
        return f"rp{self.tag}br"  # interface names hold 15 characters

    @property
    def gateway(self) -> str:
        assert self.subnet is not None
        return str(self.subnet[1])

    @property
    def hostname(self) -> str:
        """What ``$HF_NETWORK_GROUP_HOSTNAME`` names: every member."""
        return f"{self.prefix}members"

    def open(self) -> None:
        """Create the bridge, on a tag and a /24 no other group on this machine uses."""
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True,
                              timeout=IP_TIMEOUT_S).stdout  # fmt: skip
        for _ in range(TAG_TRIES):
            index = int(self.tag, 16) % 256
            self.subnet = ipaddress.IPv4Network(f"{SUBNET[index * 256]}/24")
            taken = f" {self.gateway}/" in used or Path(f"/sys/class/net/{self.bridge}").exists()
            if not taken:
                break
            self.tag = secrets.token_hex(2)
        else:
            raise DeployError(f"no free tag for the rehearsal's bridge in {TAG_TRIES} tries")
        if not self.prefix:
            self.prefix = f"{self.name}-{self.tag}-"
        _ip("link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self.write_hosts()

    def join(self, job_name: str, aliases: tuple[str, ...]) -> Member:
        assert self.subnet is not None, "open() first"
        assert len(self.members) < MAX_MEMBERS
        number = len(self.members) + 2
        netns, host_end, job_end = (f"rp{self.tag}n{number}", f"rp{self.tag}h{number}",
                                    f"rp{self.tag}j{number}")  # fmt: skip
        address = str(self.subnet[number])
        _run(["ip", "netns", "add", netns])
        member = Member(job_name, netns, address, aliases)
        self.members.append(member)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", job_end)
        self.links.append(host_end)  # deleting one end deletes the pair
        _ip("link", "set", job_end, "netns", netns)
        _ip("link", "set", host_end, "master", self.bridge, "up")
        _ip("addr", "add", f"{address}/24", "dev", job_end, netns=netns)
        _ip("link", "set", job_end, "up", netns=netns)
        _ip("link", "set", "lo", "up", netns=netns)
        self.write_hosts()
        return member

    def write_hosts(self) -> None:
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for member in self.members:
            lines.append(f"{member.address} {member.job_name} {self.hostname}")
            lines += [f"{member.address} {self.prefix}{alias}" for alias in member.aliases]
        with self.hosts_file.open("r+" if self.hosts_file.exists() else "w") as handle:
            handle.seek(0)
            handle.write("\n".join(lines) + "\n")
            handle.truncate()

    def close(self) -> None:
        """Every namespace (its processes first) and the bridge; what is gone already is fine."""
        for member in self.members:
            pids = subprocess.run(["ip", "netns", "pids", member.netns], capture_output=True,
                                  text=True, timeout=IP_TIMEOUT_S).stdout.split()  # fmt: skip
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", member.netns], capture_output=True,
                           timeout=IP_TIMEOUT_S)  # fmt: skip
        for link in reversed(self.links):  # only what this group made; gone already is fine
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=IP_TIMEOUT_S)
        self.links.clear()
