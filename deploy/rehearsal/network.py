"""The run's network group on this machine: one network namespace per job on one bridge.

Each job gets a namespace of its own (its own loopback and ports, as a job has its own machine)
with one address on a bridge the rehearsal creates, and a hosts file bind-mounted over its
``/etc/hosts`` that answers as the group's DNS does: ``${HF_NETWORK_GROUP_PREFIX}<alias>`` to
every member claiming the alias, ``$HF_NETWORK_GROUP_HOSTNAME`` to every member, and each job's
name (its host name) to its own address. The file is
rewritten in place as members join (a bind mount keeps following the same file) and as they
leave (``leave``: a job that ended or was cancelled no longer resolves, as on HF Jobs, where
an alias names the running members; its namespace stays until ``close``). The jobs'
only way out is ``Tunnel``: a CONNECT relay on the bridge that takes any ``host:443`` (HTTPS,
``HTTPS_PROXY``, ``deploy.rehearsal.tunnel``), as pip in a job reaches PyPI.

Rehearsals at once are private to each other: a group's id (two hex digits) is the index of its
/24 of ``SUBNET``, and every name it makes carries it (``rp<id>br`` its bridge, ``rp<id>n<k>``
its namespaces, ``rp<id>h<k>``/``rp<id>j<k>`` the two ends of each member's link). ``open``
claims an id by creating its bridge: ``ip link add`` refuses a name that exists, so two groups
opening at once never share one, and an id whose /24 or names anything on this machine uses is
skipped (``free_ids``). ``close`` deletes only what its group made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deploy.errors import DeployError

IP_TIMEOUT_S = 30.0  # one ``ip`` command
SUBNET = ipaddress.ip_network("10.231.0.0/16")
IDS = 256  # a /24 of SUBNET per group at once, its index the group's id
MAX_MEMBERS = 200
Call = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """One command, its output captured; never raises for its exit status."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=IP_TIMEOUT_S,
                          check=False)  # fmt: skip


def gateway_of(index: int) -> str:
    return str(SUBNET[index * 256 + 1])


def owner_of(name: str) -> int | None:
    """The id of the group that made the link or namespace ``name`` (None: no group's name)."""
    found = re.fullmatch(r"rp([0-9a-f]{2})(?:br|[nhj]\d+)", name)
    return int(found.group(1), 16) if found else None


def free_ids(order: Iterable[int], addresses: str, names: Iterable[str]) -> list[int]:
    """The ids in ``order`` whose gateway no interface holds (``addresses``: ``ip -o -4 addr``)
    and under which no link or namespace in ``names`` exists (a group's, or one a killed
    rehearsal left)."""
    held = {owner_of(name) for name in names}
    return [i for i in order if i not in held and f" {gateway_of(i)}/" not in addresses]


@dataclass(frozen=True)
class Member:
    job_name: str
    netns: str
    address: str
    aliases: tuple[str, ...]


def listed_names(links: str, namespaces: str) -> list[str]:
    """The names in ``ip -o link``'s lines (``5: rp0abr: <...>``, ``6: rp0ah2@if5: <...>``)
    and ``ip netns list``'s (``rp0an2 (id: 1)``)."""
    found = [line.split(": ")[1].split("@")[0] for line in links.splitlines() if ": " in line]
    return found + [line.split()[0] for line in namespaces.splitlines() if line.strip()]


@dataclass
class Group:
    """The group ``name``: its bridge, its members and their hosts file (``id``: see above)."""

    name: str
    hosts_file: Path
    prefix: str = ""
    call: Call = run_command
    id: int | None = None  # claimed by open()
    members: list[Member] = field(default_factory=list)
    left: set[str] = field(default_factory=set)  # the namespaces of members that left
    links: list[str] = field(default_factory=list)  # what this group created, deleted by close

    @property
    def tag(self) -> str:
        """What every name this group makes begins with."""
        assert self.id is not None, "open() first"
        return f"rp{self.id:02x}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"  # interface names hold 15 characters

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        assert self.id is not None, "open() first"
        return ipaddress.IPv4Network(f"{SUBNET[self.id * 256]}/24")

    @property
    def gateway(self) -> str:
        return str(self.subnet[1])

    @property
    def hostname(self) -> str:
        """What ``$HF_NETWORK_GROUP_HOSTNAME`` names: every member."""
        return f"{self.prefix}members"

    def owns(self, name: str) -> bool:
        """Whether the link or namespace ``name`` is one this group makes."""
        return self.id is not None and owner_of(name) == self.id

    def open(self, order: Sequence[int] | None = None) -> None:
        """Claim a free id (trying ``order``; default: every id, in a random order) by creating
        its bridge, give the bridge the gateway address, and write the hosts file."""
        addresses = self.call(["ip", "-o", "-4", "addr"]).stdout
        names = listed_names(self.call(["ip", "-o", "link"]).stdout,
                       self.call(["ip", "netns", "list"]).stdout)  # fmt: skip
        tried = secrets.SystemRandom().sample(range(IDS), IDS) if order is None else order
        for index in free_ids(tried, addresses, names):
            claim = ["ip", "link", "add", f"rp{index:02x}br", "type", "bridge"]
            made = self.call(claim)
            if made.returncode == 0:
                self.id = index
                break
            if "File exists" not in made.stderr:  # not a race lost to another group
                raise _refused(claim, made)
        else:
            raise DeployError(
                f"no free /24 of {SUBNET} for the rehearsal's network: each is in use on this "
                "machine, or its rp<id> names are (`ip -o link`, `ip netns list`); delete what a "
                "killed rehearsal left (`ip netns del NAME`, `ip link del NAME`), then rehearse"
            )
        self.links.append(self.bridge)
        if not self.prefix:
            self.prefix = f"{self.name}-{self.id:02x}-"
        self._ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        self.write_hosts()

    def join(self, job_name: str, aliases: tuple[str, ...]) -> Member:
        assert len(self.members) < MAX_MEMBERS
        number = len(self.members) + 2
        netns, host_end, job_end = (f"{self.tag}n{number}", f"{self.tag}h{number}",
                                    f"{self.tag}j{number}")  # fmt: skip
        address = str(self.subnet[number])
        self._must(["ip", "netns", "add", netns])
        member = Member(job_name, netns, address, aliases)
        self.members.append(member)
        self._ip("link", "add", host_end, "type", "veth", "peer", "name", job_end)
        self.links.append(host_end)  # deleting one end deletes the pair
        self._ip("link", "set", job_end, "netns", netns)
        self._ip("link", "set", host_end, "master", self.bridge, "up")
        self._ip("addr", "add", f"{address}/24", "dev", job_end, netns=netns)
        self._ip("link", "set", job_end, "up", netns=netns)
        self._ip("link", "set", "lo", "up", netns=netns)
        self.write_hosts()
        return member

    def write_hosts(self) -> None:
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for member in self.members:
            if member.netns in self.left:
                continue
            lines.append(f"{member.address} {member.job_name} {self.hostname}")
            lines += [f"{member.address} {self.prefix}{alias}" for alias in member.aliases]
        with self.hosts_file.open("r+" if self.hosts_file.exists() else "w") as handle:
            handle.seek(0)
            handle.write("\n".join(lines) + "\n")
            handle.truncate()

    def leave(self, member: Member) -> None:
        """``member``'s names and aliases out of the hosts file (the module docstring)."""
        self.left.add(member.netns)
        self.write_hosts()

    def kill(self, member: Member) -> None:
        """SIGKILL every process still in ``member``'s namespace (a job's machine switched off)."""
        for pid in self.call(["ip", "netns", "pids", member.netns]).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        """This group's namespaces (their processes first) and links, nothing else; what is
        gone already is fine."""
        for member in self.members:
            self.kill(member)
            self.call(["ip", "netns", "del", member.netns])
        for link in reversed(self.links):  # the bridge last
            self.call(["ip", "link", "del", link])
        self.links.clear()

    def _ip(self, *args: str, netns: str | None = None) -> None:
        self._must([*(("ip", "netns", "exec", netns) if netns else ()), "ip", *args])

    def _must(self, argv: list[str]) -> None:
        done = self.call(argv)
        if done.returncode != 0:
            raise _refused(argv, done)


def _refused(argv: Sequence[str], done: subprocess.CompletedProcess[str]) -> DeployError:
    said = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
    return DeployError(
        f"the rehearsal could not build its network: `{shlex.join(argv)}` failed ({said[0]}): "
        "it needs root on a host that allows network namespaces and bridges"
    )
