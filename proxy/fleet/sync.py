"""The fleet's paused state, TRL's sync windows, and admitting a replica in step.

The proxy is the only writer of the state changes TRL makes (adapters, paused or not), so a
replica that joins or comes back from ejection is brought in step before it takes traffic:
its adapters by its agent (``proxy.adapters.agent``: it lists the replica afresh and loads the
window), then a forwarded pause (``--forward-pause``) replayed, then it is admitted. The replay
and the admission hold ``changes``, the lock every fanned-out pause, resume and cache reset
holds too: a change either reached the replica through the replay or finds it routable and
reaches it through the fan-out, never neither. (An adapter loaded meanwhile is its agent's to
load whatever the routing set; a request for it is only routed to replicas that hold it.)

It also keeps TRL's sync windows (its ``/pause`` to its ``/resume``) and how long the fleet was
frozen in them: only a forwarded pause freezes it; by default the proxy answers the pause itself
and the fleet generates throughout (``proxy.dataplane.fanout``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from proxy.clock import Clock
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import UpstreamError

log = logging.getLogger("proxy.fleet")


class NotInStep(Exception):
    """A replica could not be brought in step with the fleet (the message says why)."""


class AdapterWindow(Protocol):
    """What the sync needs from the adapter service."""

    def knows(self, name: str) -> bool: ...

    async def admit(self, replica: Replica) -> bool: ...

    def resync(self, replica: Replica) -> None: ...


class FleetSync:
    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        info: FleetInfo,
        adapters: AdapterWindow,
        clock: Clock,
        *,
        forward_pause: bool = False,
    ) -> None:
        self.pool = pool
        # TRL's /pause and /resume go to the replicas (else the proxy answers them itself).
        self.forward_pause = forward_pause
        self.client = client
        self.info = info
        self.adapters = adapters
        self._clock = clock
        self._pause_query: str | None = None  # the query string of the last /pause, while frozen
        self.changes = asyncio.Lock()  # a pause, resume or cache reset fanned out; an admission
        # TRL's sync windows (a /pause to its /resume) and the fleet's frozen share of them.
        self._window_since: float | None = None
        self._frozen = False  # the open window's pause went to the replicas
        self.paused_s_total = 0.0  # seconds the fleet stood frozen, closed windows
        self.syncs = 0
        self.last_window_s: float | None = None

    @property
    def paused(self) -> bool:
        """The replicas are frozen now (a forwarded ``/pause`` not yet resumed)."""
        return self._pause_query is not None

    @property
    def syncing(self) -> bool:
        """A sync window is open (TRL paused, not yet resumed), frozen or not."""
        return self._window_since is not None

    def control_applied(self, path: str, query: str, *, frozen: bool) -> float | None:
        """``/pause``, ``/resume`` or ``/reset_prefix_cache`` was carried out: remember it.

        ``frozen``: it went to the replicas (else the proxy answered it from this state, and
        nothing changed on the fleet). Returns the length of the sync window a ``/resume``
        closes (else None)."""
        now = self._clock.monotonic()
        if path == "/pause":
            if frozen:
                self._pause_query = f"?{query}" if query else ""
            if self._window_since is None:
                self._window_since = now
            self._frozen = self._frozen or frozen
        elif path == "/resume":
            self._pause_query = None
            if self._window_since is not None:
                window = now - self._window_since
                self._window_since = None
                if self._frozen:
                    self.paused_s_total += window
                self._frozen = False
                self.syncs += 1
                self.last_window_s = window
                return window
        return None

    def paused_seconds(self) -> float:
        """Seconds the fleet has stood frozen so far (the current window included)."""
        since = self._window_since
        now = self._clock.monotonic()
        return self.paused_s_total + (now - since if since is not None and self._frozen else 0)

    def unknown(self, model: str) -> bool:
        """True only when the fleet has listed its models and none serves or loads ``model``.

        O(1) for the common cases (an adapter the registry knows, a base model seen before).
        """
        bases = self.info.bases
        if model in bases or self.adapters.knows(model):
            return False
        if not bases:
            return False  # no replica has listed its models yet: let a replica answer
        return not any(replica.serves(model) for replica in self.pool)

    async def refresh_info(self, replica: Replica) -> None:
        """Re-read ``replica``'s own view (its agent lists it, in its own turn)."""
        self.adapters.resync(replica)

    async def admit(self, replica: Replica) -> bool:
        """Bring ``replica`` in step (models, adapters, paused) and admit it; True when it may
        take traffic."""
        try:
            if not await self.adapters.admit(replica):
                raise NotInStep(replica.last_error or "adapter window not loaded")
            async with self.changes:
                await self._replay_pause(replica)
                if self.pool.get(replica.id) is replica:
                    self.pool.admit(replica)
        except (UpstreamError, NotInStep) as exc:
            error = f"sync failed: {exc}"
            if error != replica.last_error:  # say it once, not on every probe
                log.warning("replica %s not admitted: %s", replica.id, error)
            self.pool.note_error(replica, error)
            return False
        return True

    async def _replay_pause(self, replica: Replica) -> None:
        if self._pause_query is not None:
            reply = await self.client.call(replica, "POST", "/pause" + self._pause_query)
            if reply.status != 200:
                raise NotInStep(f"replaying pause answered HTTP {reply.status}")
