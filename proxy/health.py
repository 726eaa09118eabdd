"""Health: a pure transition function, and the loop that probes replicas and applies it.

Rules kept by ``next_state``:
- ``eject_after`` consecutive failed probes eject a healthy replica;
- ``readmit_after`` consecutive good probes readmit an ejected one; a replica never seen healthy
  (PENDING) is admitted on its first good probe;
- admission is a request, not a fact: the loop first brings the replica in step with the fleet
  (models, paused state, adapters), and only then marks it healthy.
Passive ejection (connection errors seen by the forwarder) goes through ``ReplicaPool.set_health``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Protocol

from proxy.client import SYNC_ERRORS, TRANSPORT_ERRORS, UpstreamClient
from proxy.clock import Clock
from proxy.config import HealthSettings
from proxy.upstreams import Health, Replica, ReplicaPool

log = logging.getLogger("proxy.health")


class Transition(enum.Enum):
    NONE = "none"
    EJECT = "eject"
    ADMIT = "admit"


@dataclass(frozen=True, slots=True)
class ProbeState:
    health: Health
    ok_streak: int
    fail_streak: int


def next_state(
    prev: ProbeState, ok: bool, settings: HealthSettings
) -> tuple[ProbeState, Transition]:
    """The state after one probe, and what the caller must do about it."""
    if ok:
        streak = prev.ok_streak + 1
        state = ProbeState(prev.health, streak, 0)
        if prev.health is Health.PENDING or (
            prev.health is Health.EJECTED and streak >= settings.readmit_after
        ):
            return state, Transition.ADMIT
        return state, Transition.NONE
    streak = prev.fail_streak + 1
    state = ProbeState(prev.health, 0, streak)
    if prev.health is Health.HEALTHY and streak >= settings.eject_after:
        return ProbeState(Health.EJECTED, 0, streak), Transition.EJECT
    return state, Transition.NONE


class FleetSync(Protocol):
    """What the monitor needs from the fleet: admission sync and a periodic info refresh."""

    async def admit(self, replica: Replica) -> bool: ...

    async def refresh_info(self, replica: Replica) -> None: ...


class HealthMonitor:
    """Probes every replica each ``interval_s``; admits through the fleet's sync."""

    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        settings: HealthSettings,
        clock: Clock,
        fleet: FleetSync,
    ) -> None:
        self._pool = pool
        self._client = client
        self._settings = settings
        self._clock = clock
        self._fleet = fleet
        self._admitting: set[str] = set()

    async def run(self) -> None:
        while True:
            await self.probe_all()
            await self._clock.sleep(self._settings.interval_s)

    async def probe_all(self) -> None:
        await asyncio.gather(*(self.probe(replica) for replica in self._pool))

    async def probe(self, replica: Replica) -> None:
        ok, error = await self._check(replica)
        prev = ProbeState(replica.health, replica.ok_streak, replica.fail_streak)
        state, transition = next_state(prev, ok, self._settings)
        replica.ok_streak, replica.fail_streak = state.ok_streak, state.fail_streak
        if transition is Transition.EJECT:
            log.warning(
                "replica %s ejected after %d failed probes: %s",
                replica.id,
                state.fail_streak,
                error,
            )
            self._pool.set_health(replica, Health.EJECTED, error)
        elif transition is Transition.ADMIT and replica.id not in self._admitting:
            if self._clock.monotonic() >= replica.cooldown_until:
                await self._admit(replica)
        elif not ok and error:
            replica.last_error = error
        elif ok and replica.routable:
            await self._maybe_refresh(replica)

    async def _admit(self, replica: Replica) -> None:
        self._admitting.add(replica.id)
        try:
            if await self._fleet.admit(replica) and self._pool.get(replica.id) is replica:
                replica.info_at = self._clock.monotonic()
                replica.last_error = ""
                log.info("replica %s admitted", replica.id)
                self._pool.set_health(replica, Health.HEALTHY)
        finally:
            self._admitting.discard(replica.id)

    async def _maybe_refresh(self, replica: Replica) -> None:
        now = self._clock.monotonic()
        if now - replica.info_at < self._settings.info_refresh_s:
            return
        replica.info_at = now
        try:
            await self._fleet.refresh_info(replica)
        except SYNC_ERRORS as exc:
            log.warning("replica %s: info refresh failed: %s", replica.id, exc)

    async def _check(self, replica: Replica) -> tuple[bool, str]:
        try:
            reply = await self._client.call(
                replica, "GET", "/health", timeout_s=self._settings.timeout_s
            )
        except TRANSPORT_ERRORS as exc:
            return False, f"probe failed: {type(exc).__name__}"
        if reply.status != 200:
            return False, f"probe answered HTTP {reply.status}"
        return True, ""
