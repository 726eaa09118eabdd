"""The fleet's desired state, and bringing one replica in step with it.

The proxy is the only writer of the state changes TRL makes (adapters, paused or not), so it
remembers them and replays them into a replica that joins or comes back from ejection before
that replica takes traffic. ``epoch`` (with the registry's) counts changes, so a sync that raced
a pause, a resume or an adapter load runs again.
"""

from __future__ import annotations

import logging

from proxy.adapters.service import AdapterService
from proxy.client import SYNC_ERRORS, UpstreamClient
from proxy.replica_info import max_loras, refresh_info
from proxy.upstreams import Replica, ReplicaPool

log = logging.getLogger("proxy.fleet")

_SYNC_ROUNDS = 3


class Fleet:
    def __init__(self, pool: ReplicaPool, client: UpstreamClient, adapters: AdapterService):
        self.pool = pool
        self.client = client
        self.adapters = adapters
        self.pause_query: str | None = None  # the query string of the last /pause, while paused
        self._bases: set[str] = set()  # base models replicas have listed
        self.epoch = 0

    def changed(self) -> None:
        self.epoch += 1

    def _epoch(self) -> tuple[int, int]:
        return self.epoch, self.adapters.registry.epoch

    def unknown(self, model: str) -> bool:
        """True only when the fleet has listed its models and none serves or loads ``model``.

        O(1) for the common cases (an adapter the registry knows, a base model seen before).
        """
        if model in self._bases or self.adapters.knows(model):
            return False
        if not self._bases:
            return False  # no replica has listed its models yet: let a replica answer
        return not any(replica.serves(model) for replica in self.pool)

    async def refresh_info(self, replica: Replica) -> None:
        await refresh_info(self.client, replica)
        if replica.base_model is not None:
            self._bases.add(replica.base_model)
        self._update_limits()

    def _update_limits(self) -> None:
        limits = [m for m in map(max_loras, self.pool) if m is not None]
        self.adapters.registry.max_loras = min(limits) if limits else None

    async def admit(self, replica: Replica) -> bool:
        """Bring ``replica`` in step (models, adapters, paused); True when it may take traffic."""
        try:
            for _ in range(_SYNC_ROUNDS):
                epoch = self._epoch()
                await self.refresh_info(replica)
                if not await self.adapters.admit(replica):
                    raise RuntimeError(replica.last_error or "adapter window not loaded")
                await self._replay_pause(replica)
                if epoch == self._epoch():  # nothing changed meanwhile: the replica is in step
                    return True
        except SYNC_ERRORS as exc:
            error = f"sync failed: {exc}"
            if error != replica.last_error:  # say it once, not on every probe
                log.warning("replica %s not admitted: %s", replica.id, error)
            replica.last_error = error
            return False
        return False

    async def _replay_pause(self, replica: Replica) -> None:
        if self.pause_query is not None:
            reply = await self.client.call(replica, "POST", "/pause" + self.pause_query)
            if reply.status != 200:
                raise RuntimeError(f"replaying pause answered HTTP {reply.status}")
