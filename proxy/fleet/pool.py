"""The replicas, and the one place their membership, health, draining and reported models and
server info change (the other fields' writers: ``fleet.replica``).

A replica is *routable* when it is healthy and not draining; the routable set is cached and
rebuilt on every change, and the ``on_change`` listeners are told (the limiter wakes queued
requests).

Ejection has exactly one path, ``eject``, whoever calls it (health probes, the forwarder, the
circuit breaker, fan-out, adapter broadcasts): it records the cause and the error, resets the
good-probe streak (so ``--readmit-after`` good probes are needed to come back), sets an optional
cool-down, logs once, and counts ``rollout_proxy_ejections_total{cause}`` through its ``on_eject``
listeners."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Literal

from proxy.clock import Clock
from proxy.config import check_replica_url
from proxy.errors import DomainError
from proxy.fleet.replica import Health, Replica, replica_id

log = logging.getLogger("proxy.fleet")

# Why a replica was ejected: the label values of rollout_proxy_ejections_total.
EjectCause = Literal[
    "probe", "transport", "connect_timeout", "midstream", "circuit", "fanout", "broadcast"
]
EJECT_CAUSES: tuple[EjectCause, ...] = (
    "probe",
    "transport",
    "connect_timeout",
    "midstream",
    "circuit",
    "fanout",
    "broadcast",
)


class NoReplica(DomainError):
    """No replica is routable right now (the edge answers 503 with Retry-After)."""

    def __init__(self) -> None:
        super().__init__("no replica is available; retry when /health answers 200")


class ReplicaPool:
    """The replicas, by id, in the order they were added."""

    def __init__(self, urls: list[str] | None = None, *, clock: Clock) -> None:
        self._clock = clock
        self._on_eject: list[Callable[[EjectCause], None]] = []
        self._on_change: list[Callable[[], None]] = []
        self._replicas: dict[str, Replica] = {}
        self._routable: tuple[Replica, ...] = ()
        self.ids: tuple[str, ...] = ()  # members in pool order; changes only on add/remove
        for url in urls or ():
            self.add(url)

    def listen(
        self,
        *,
        on_change: Callable[[], None] | None = None,
        on_eject: Callable[[EjectCause], None] | None = None,
    ) -> None:
        """Be told of every change of the routable set (the limiter wakes queued requests) or
        of every ejection, with its cause (the metrics count them)."""
        if on_change is not None:
            self._on_change.append(on_change)
        if on_eject is not None:
            self._on_eject.append(on_eject)

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

    def total_inflight(self) -> int:
        return sum(r.inflight for r in self._replicas.values())

    def refresh(self) -> None:
        """Recompute the routable set and tell the ``on_change`` listeners."""
        self._routable = tuple(r for r in self._replicas.values() if r.routable)
        self.ids = tuple(self._replicas)
        for listener in self._on_change:
            listener()

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
        replica.ok_streak = 0
        replica.last_error = error
        if cooldown_s > 0:
            until = self._clock.monotonic() + cooldown_s
            replica.cooldown_until = max(replica.cooldown_until, until)
        if replica.health is Health.EJECTED:
            return False
        log.warning("replica %s ejected (%s): %s", replica.id, cause, error)
        replica.health = Health.EJECTED
        for listener in self._on_eject:
            listener(cause)
        self.refresh()
        return True

    def admit(self, replica: Replica) -> None:
        """Mark ``replica`` healthy: it has been probed and brought in step with the fleet."""
        if replica.health is not Health.HEALTHY:
            was = f" (was: {replica.last_error})" if replica.last_error else ""
            log.info("replica %s admitted%s", replica.id, was)
        replica.health = Health.HEALTHY
        replica.last_error = ""
        self.refresh()

    def cooling(self, replica: Replica) -> bool:
        """True while an opened circuit keeps ``replica`` from being readmitted."""
        return self._clock.monotonic() < replica.cooldown_until

    def drain(self, replica: Replica, draining: bool) -> None:
        replica.draining = draining
        self.refresh()

    def note_probe(self, replica: Replica, ok_streak: int, fail_streak: int) -> None:
        replica.ok_streak, replica.fail_streak = ok_streak, fail_streak

    def note_error(self, replica: Replica, error: str) -> None:
        replica.last_error = error

    # -- what the replica reported --------------------------------------------------------------

    def set_models(
        self,
        replica: Replica,
        *,
        base_model: str,
        max_model_len: int | None,
        entries: list[dict[str, Any]],
    ) -> None:
        replica.base_model = base_model
        replica.max_model_len = max_model_len
        replica.model_entries = entries
        self.refresh()

    def set_server_info(self, replica: Replica, info: dict[str, Any] | None) -> None:
        replica.server_info = info
