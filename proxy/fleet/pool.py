"""The replicas, and the one place their membership and standing (health, draining, streaks,
cool-down, last error) change (the other records' writers: ``fleet.replica``).

A replica is *routable* when it is healthy and not draining; the routable set is cached and
rebuilt on every change, and the followers given at construction are told (the limiter wakes
queued requests).

Ejection has exactly one path, ``eject``, whoever calls it (health probes, the forwarder, the
outlier detection, fan-out, adapter loads): it records the cause and the error, resets the
good-probe streak (so ``--readmit-after`` good probes are needed to come back), sets an optional
cool-down, logs once, and counts the cause (``ejections``: ``rollout_proxy_ejections_total``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

from proxy.clock import Clock
from proxy.config import check_replica_url
from proxy.errors import DomainError
from proxy.fleet.replica import Health, Replica, replica_id

log = logging.getLogger("proxy.fleet")

# Why a replica was ejected: the label values of rollout_proxy_ejections_total.
EjectCause = Literal["probe", "transport", "midstream", "circuit", "fanout", "broadcast"]
EJECT_CAUSES: tuple[EjectCause, ...] = (
    "probe",
    "transport",
    "midstream",
    "circuit",
    "fanout",
    "broadcast",
)


class NoReplica(DomainError):
    """No replica is routable right now (the edge answers 503 with Retry-After)."""

    def __init__(self) -> None:
        super().__init__("no replica is available; retry when /health answers 200")


Follower = Callable[["ReplicaPool"], None]

NO_REPLICA_GRACE_S = 10.0  # a blip, not an outage: ten probe rounds at --health-interval 1 s


class ReplicaPool:
    """The replicas, by id, in the order they were added. ``followers`` are told of every
    change (members, the routable set, adapters loaded), the pool given: the limiter wakes
    queued requests and follows the cap, the outage notes when the fleet went dark."""

    def __init__(
        self,
        urls: list[str] | None = None,
        *,
        clock: Clock,
        followers: Sequence[Follower] = (),
        grace_s: float = NO_REPLICA_GRACE_S,
    ) -> None:
        self._clock = clock
        self._followers = tuple(followers)
        self._replicas: dict[str, Replica] = {}
        self._routable: tuple[Replica, ...] = ()
        self.grace_s = grace_s  # how long the fleet may be dark before it is an outage
        self.dark_since: float | None = None  # when the routable set became empty
        self._lit = asyncio.Event()  # set while a replica is routable
        self.ids: tuple[str, ...] = ()  # members in pool order; changes only on add/remove
        self.ejections: dict[EjectCause, int] = dict.fromkeys(EJECT_CAUSES, 0)  # by cause
        for url in urls or ():
            self.add(url)
        self.refresh()

    def follow(self, follower: Follower) -> None:
        """``follower`` is told of every change from now on, as those given at construction."""
        self._followers = (*self._followers, follower)

    def __iter__(self) -> Iterator[Replica]:
        return iter(tuple(self._replicas.values()))

    def __len__(self) -> int:
        return len(self._replicas)

    def get(self, rid: str) -> Replica | None:
        return self._replicas.get(rid)

    def routable(self) -> tuple[Replica, ...]:
        """Healthy, not draining; cached and rebuilt on every state change."""
        return self._routable

    def require_routable(self) -> tuple[Replica, ...]:
        """The routable replicas; ``NoReplica`` when there are none."""
        if not self._routable:
            raise NoReplica
        return self._routable

    def in_outage(self) -> bool:
        """The fleet has been dark (no routable replica) for longer than the grace."""
        since = self.dark_since
        return since is not None and self._clock.monotonic() - since >= self.grace_s

    async def wait_routable(self) -> tuple[Replica, ...]:
        """The routable replicas, for a call that is not retried (TRL's load, pause, resume):
        in a blip (the fleet dark for less than the grace: a replica being readmitted, a
        restarted proxy's first probes) it waits for one until the grace ends; then, or in an
        outage, ``NoReplica``."""
        since = self.dark_since
        if not self._routable and since is not None:
            left = since + self.grace_s - self._clock.monotonic()
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._lit.wait()
        return self.require_routable()

    def total_inflight(self) -> int:
        return sum(r.inflight for r in self._replicas.values())

    def refresh(self) -> None:
        """Recompute the routable set and tell the followers."""
        self._routable = tuple(r for r in self._replicas.values() if r.routable)
        self.ids = tuple(self._replicas)
        if self._routable:
            self.dark_since = None
            self._lit.set()
        else:
            self._lit.clear()
            if self.dark_since is None:
                self.dark_since = self._clock.monotonic()
        for follower in self._followers:
            follower(self)

    # -- membership ---------------------------------------------------------------------------

    def add(self, url: str) -> Replica:
        rid = replica_id(check_replica_url(url))
        if rid in self._replicas:
            raise ValueError(f"replica {rid} is already in the pool")
        replica = Replica(id=rid, url=url.rstrip("/"))
        self._replicas[rid] = replica
        self.refresh()
        return replica

    def remove(self, rid: str) -> Replica:
        replica = self._replicas.pop(rid)
        self.refresh()
        return replica

    # -- health -------------------------------------------------------------------------------

    def eject(
        self, replica: Replica, cause: EjectCause, error: str, *, cooldown_s: float = 0.0
    ) -> bool:
        """Take ``replica`` out of routing until the health loop readmits it.

        True when this call ejected it (it was not ejected already). ``cooldown_s``: it is not
        readmitted before that many seconds have passed (an opened circuit)."""
        standing = replica.standing
        standing.ok_streak = 0
        standing.last_error = error
        if cooldown_s > 0:
            until = self._clock.monotonic() + cooldown_s
            standing.cooldown_until = max(standing.cooldown_until, until)
        if standing.health is Health.EJECTED:
            return False
        log.warning("replica %s ejected (%s): %s", replica.id, cause, error)
        standing.health = Health.EJECTED
        self.ejections[cause] += 1
        self.refresh()
        return True

    def admit(self, replica: Replica) -> None:
        """Mark ``replica`` healthy: it has been probed and brought in step with the fleet."""
        if replica.health is not Health.HEALTHY:
            was = f" (was: {replica.last_error})" if replica.last_error else ""
            log.info("replica %s admitted%s", replica.id, was)
        replica.standing.health = Health.HEALTHY
        replica.standing.last_error = ""
        self.refresh()

    def cooling(self, replica: Replica) -> bool:
        """True while an opened circuit keeps ``replica`` from being readmitted."""
        return self._clock.monotonic() < replica.standing.cooldown_until

    def drain(self, replica: Replica, draining: bool) -> None:
        replica.standing.draining = draining
        self.refresh()

    def note_probe(self, replica: Replica, ok_streak: int, fail_streak: int) -> None:
        replica.standing.ok_streak, replica.standing.fail_streak = ok_streak, fail_streak

    def note_error(self, replica: Replica, error: str) -> None:
        replica.standing.last_error = error
