"""Health: a pure transition function, and the loop that probes replicas and applies it.

Rules kept by ``next_state``:
- ``eject_after`` consecutive failed probes eject a healthy replica;
- ``readmit_after`` consecutive good probes readmit an ejected one; a replica never seen healthy
  (PENDING) is admitted on its first good probe;
- admission is a request, not a fact: the loop first brings the replica in step with the fleet
  (models, paused state, adapters), and only then marks it healthy.
Each replica's first failed probe, a change of its reason and its recovery are logged (WARNING
for going bad, INFO for coming back: ``ReplicaPool.admit``), never a line per probe; the reason,
in words (``upstream.reasons``), is the replica's ``last_error`` that ``/health``,
``/proxy/status`` and ``top`` show.
The loop applies the result through the pool (``ReplicaPool.eject`` / ``admit``), the one owner
of replica state; passive ejections (the forwarder's outliers, fan-out) go the same way.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Protocol

from proxy.clock import Clock, TaskFailed, run_every
from proxy.config import HealthSettings
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health, Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import Blame, UpstreamError, blame
from proxy.upstream.reasons import failure_reason, status_reason

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


def _standing(replica: Replica) -> str:
    """How a failed probe leaves ``replica``, for its WARNING line."""
    if replica.health is Health.PENDING:
        return "not ready"
    return "still down" if replica.health is Health.EJECTED else "failed a probe"


class Admission(Protocol):
    """What the monitor needs from the fleet: admission (brought in step, then admitted) and a
    periodic info refresh."""

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
        fleet: Admission,
        failed: TaskFailed,
    ) -> None:
        self._pool = pool
        self._client = client
        self._settings = settings
        self._clock = clock
        self._fleet = fleet
        self._failed = failed
        self._admitting: set[str] = set()
        self._info_at: dict[str, float] = {}  # replica id -> clock time of its last info refresh

    async def run(self) -> None:
        await run_every(
            self._clock,
            lambda: self._settings.interval_s,
            self.probe_all,
            task="health",
            failed=self._failed,
        )

    async def probe_all(self) -> None:
        """One probe round; a probe that fails unexpectedly is reported, the others go on."""
        for gone in self._info_at.keys() - set(self._pool.ids):
            del self._info_at[gone]
        results = await asyncio.gather(
            *(self.probe(replica) for replica in self._pool), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                self._failed("health", result)
            elif isinstance(result, BaseException):
                raise result

    async def probe(self, replica: Replica) -> None:
        ok, error = await self._check(replica)
        if ok is None:  # the proxy's own resources ran out: says nothing about the replica
            return
        prev = ProbeState(replica.health, replica.standing.ok_streak, replica.standing.fail_streak)
        state, transition = next_state(prev, ok, self._settings)
        self._pool.note_probe(replica, state.ok_streak, state.fail_streak)
        if not ok and error != replica.last_error:  # the first failure, or a new reason
            log.warning("replica %s %s: %s", replica.id, _standing(replica), error)
        if transition is Transition.EJECT:
            self._pool.eject(replica, "probe", error)
        elif transition is Transition.ADMIT and replica.id not in self._admitting:
            if not self._pool.cooling(replica):
                await self._admit(replica)
        elif not ok and error:
            self._pool.note_error(replica, error)
        elif ok and replica.routable:
            if replica.last_error:  # failed a probe or two, never ejected: it answers again
                log.info("replica %s answers its probes again", replica.id)
                self._pool.note_error(replica, "")
            await self._maybe_refresh(replica)

    async def _admit(self, replica: Replica) -> None:
        self._admitting.add(replica.id)
        try:
            if await self._fleet.admit(replica):  # in step and admitted (``FleetSync.admit``)
                self._info_at[replica.id] = self._clock.monotonic()
        finally:
            self._admitting.discard(replica.id)

    async def _maybe_refresh(self, replica: Replica) -> None:
        now = self._clock.monotonic()
        if now - self._info_at.get(replica.id, float("-inf")) < self._settings.info_refresh_s:
            return
        self._info_at[replica.id] = now
        try:
            await self._fleet.refresh_info(replica)
        except UpstreamError as exc:
            log.warning("replica %s: info refresh failed: %s", replica.id, exc)

    async def _check(self, replica: Replica) -> tuple[bool | None, str]:
        try:
            reply = await self._client.call(
                replica, "GET", "/health", timeout_s=self._settings.timeout_s
            )
        except UpstreamError as exc:
            if blame(exc) is Blame.OURS:
                log.warning("replica %s not probed: %s (the proxy's own limit)", replica.id, exc)
                return None, ""
            return False, f"probe failed: {failure_reason(exc, self._settings.timeout_s)}"
        if reply.status != 200:
            return False, f"probe answered {status_reason(reply.status)}"
        return True, ""
