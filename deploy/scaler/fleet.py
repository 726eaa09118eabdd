"""The run's replicas as the scaler sees them: each replica job (the Jobs API, by label) joined
to what the proxy says of the replica it routes to (``/proxy/status``). Pure: the caller lists
the jobs, reads the proxy and resolves the addresses; ``observe`` joins them.

How a job is mapped to the proxy's replica: on a fleet that sizes itself every replica job
claims its own alias, ``replica-<index>`` (``JobSpec.numbered``), in the run's network group;
``${HF_NETWORK_GROUP_PREFIX}replica-<index>`` resolves to that job's address (the group's DNS,
as for the shared ``replica`` alias the proxy discovers them by), and the proxy's replica at
``http://ADDRESS:PORT`` is that job's. A job run again by HF Jobs comes back at a new address
under the same alias, so the mapping follows it; a job whose alias does not resolve yet (still
scheduling) maps to nothing and counts as starting.

What each job counts as (the decider's ``Window``):
- ready: RUNNING, mapped to a replica the proxy routes to, not being retired;
- starting: not ended, not ready, not being retired (scheduling, loading, or unroutable);
- draining: being retired (drained at the proxy, then cancelled), until the job has ended.
Ended jobs (COMPLETED, CANCELED, ERROR, DELETED) count for nothing but the next free index.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from deploy.jobs import JobView


@dataclass(frozen=True)
class ProxyReplica:
    """One replica as ``/proxy/status`` lists it."""

    id: str
    host: str
    port: int
    routable: bool
    draining: bool
    inflight: int
    cached_tokens: float  # prompt tokens its prefix cache served since the proxy started

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> ProxyReplica | None:
        """The replica ``entry`` describes (None for an entry without a usable URL)."""
        parts = urlsplit(str(entry.get("url", "")))
        if not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(
            id=str(entry.get("id", f"{parts.hostname}:{port}")),
            host=_host(parts.hostname),
            port=port,
            routable=bool(entry.get("routable")),
            draining=bool(entry.get("draining")),
            inflight=int(entry.get("inflight") or 0),
            cached_tokens=float(entry.get("cached_tokens") or 0.0),
        )


def proxy_replicas(status: Mapping[str, Any]) -> list[ProxyReplica]:
    """Every replica of a ``/proxy/status`` answer."""
    found = (ProxyReplica.of(entry) for entry in status.get("replicas") or [])
    return [replica for replica in found if replica is not None]


def _host(host: str) -> str:
    """An address as one spelling (IPv6 compressed, zone dropped); a name as is, lowercased."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return bare.lower()


@dataclass(frozen=True)
class Member:
    """One replica job of the run and the proxy's replica it maps to."""

    job: JobView
    replica: ProxyReplica | None
    retiring: bool = False

    @property
    def live(self) -> bool:
        return not self.job.terminal

    @property
    def ready(self) -> bool:
        replica = self.replica
        return (
            self.live
            and not self.retiring
            and self.job.stage == "RUNNING"
            and replica is not None
            and replica.routable
            and not replica.draining
        )

    @property
    def starting(self) -> bool:
        return self.live and not self.retiring and not self.ready

    @property
    def draining(self) -> bool:
        return self.live and self.retiring


@dataclass(frozen=True)
class Fleet:
    """The run's replica jobs (every one the Jobs API lists, ended ones included)."""

    members: tuple[Member, ...]

    @property
    def live(self) -> list[Member]:
        return [member for member in self.members if member.live]

    @property
    def ready(self) -> int:
        return sum(1 for member in self.members if member.ready)

    @property
    def starting(self) -> int:
        return sum(1 for member in self.members if member.starting)

    @property
    def draining(self) -> int:
        return sum(1 for member in self.members if member.draining)

    @property
    def wanted(self) -> int:
        """What the fleet will be once what starts has started: ready and starting."""
        return self.ready + self.starting

    @property
    def next_index(self) -> int:
        """The index a new replica job takes: past every one the run ever had."""
        return 1 + max((member.job.index for member in self.members), default=-1)

    def by_id(self, job_id: str) -> Member | None:
        return next((member for member in self.members if member.job.id == job_id), None)


def observe(
    jobs: Iterable[JobView],
    replicas: Sequence[ProxyReplica],
    addresses: Mapping[int, Collection[str]],
    port: int,
    retiring: Collection[str] = (),
) -> Fleet:
    """The fleet: each replica job in ``jobs`` with the proxy's replica at one of its
    ``addresses`` (by the job's index) on ``port``; ``retiring``: the job ids being retired."""
    members = []
    for job in jobs:
        if job.role != "replica":
            continue
        hosts = {_host(address) for address in addresses.get(job.index, ())}
        mine = [r for r in replicas if r.host in hosts and r.port == port]
        mine.sort(key=lambda r: (not r.routable, r.draining))  # a retry's live address first
        members.append(Member(job, mine[0] if mine else None, job.id in retiring))
    return Fleet(tuple(members))
