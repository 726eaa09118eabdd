"""The fleet's desired state, and bringing one replica in step with it.

The proxy is the only writer of the state changes TRL makes (adapters, paused or not), so it
remembers them and replays them into a replica that joins or comes back from ejection before
that replica takes traffic. ``epoch`` (with the adapter window's) counts changes, so a sync that
raced a pause, a resume or an adapter load runs again.

It also keeps TRL's sync windows (its ``/pause`` to its ``/resume``) and how long the fleet was
frozen in them: only a forwarded pause freezes it (``--forward-pause``); by default the proxy
answers the pause itself and the fleet generates throughout (``proxy.dataplane.fanout``).
"""

from __future__ import annotations

import logging
from typing import Protocol

from proxy.clock import Clock
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import CONTROL_ERRORS

log = logging.getLogger("proxy.fleet")

_SYNC_ROUNDS = 3


class NotInStep(Exception):
    """A replica could not be brought in step with the fleet (the message says why)."""


_SYNC_ERRORS: tuple[type[BaseException], ...] = (*CONTROL_ERRORS, NotInStep)


class AdapterWindow(Protocol):
    """What the sync needs from the adapter service."""

    @property
    def epoch(self) -> int: ...

    def knows(self, name: str) -> bool: ...

    def limit(self, max_loras: int | None) -> None: ...

    async def admit(self, replica: Replica) -> bool: ...


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
        self.epoch = 0
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
        if frozen:
            self.epoch += 1
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

    def _epoch(self) -> tuple[int, int]:
        return self.epoch, self.adapters.epoch

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
        """Re-read ``replica``'s own view; the adapter window follows the fleet's max_loras."""
        await self.info.refresh(replica)
        self.adapters.limit(self.info.smallest_max_loras())

    async def admit(self, replica: Replica) -> bool:
        """Bring ``replica`` in step (models, adapters, paused); True when it may take traffic."""
        try:
            for _ in range(_SYNC_ROUNDS):
                epoch = self._epoch()
                await self.refresh_info(replica)
                if not await self.adapters.admit(replica):
                    raise NotInStep(replica.last_error or "adapter window not loaded")
                await self._replay_pause(replica)
                if epoch == self._epoch():  # nothing changed meanwhile: the replica is in step
                    return True
        except _SYNC_ERRORS as exc:
            error = f"sync failed: {exc}"
            if error != replica.last_error:  # say it once, not on every probe
                log.warning("replica %s not admitted: %s", replica.id, error)
            self.pool.note_error(replica, error)
            return False
        return False

    async def _replay_pause(self, replica: Replica) -> None:
        if self._pause_query is not None:
            reply = await self.client.call(replica, "POST", "/pause" + self._pause_query)
            if reply.status != 200:
                raise NotInStep(f"replaying pause answered HTTP {reply.status}")
