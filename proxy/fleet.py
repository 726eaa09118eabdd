"""The fleet's desired state, and bringing one replica in step with it.

The proxy is the only writer of state changes TRL makes (adapters loaded, paused or not), so it
remembers them here and replays them into a replica that joins or comes back from ejection before
that replica takes traffic. ``epoch`` counts changes so a sync that raced a change runs again.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from proxy.client import SYNC_ERRORS, UpstreamClient
from proxy.upstreams import Replica, ReplicaPool

log = logging.getLogger("proxy.fleet")

_SYNC_ROUNDS = 3


class Fleet:
    def __init__(self, pool: ReplicaPool, client: UpstreamClient) -> None:
        self.pool = pool
        self.client = client
        self.adapters: dict[str, str] = {}  # loaded through the proxy: lora name -> path
        self.pause_query: str | None = None  # the query string of the last /pause, while paused
        self.epoch = 0

    def changed(self) -> None:
        self.epoch += 1

    def knows(self, model: str) -> bool:
        """True if any replica serves ``model`` or the fleet loaded it."""
        if model in self.adapters:
            return True
        return any(replica.serves(model) for replica in self.pool)

    def has_model_info(self) -> bool:
        return any(replica.base_model is not None for replica in self.pool)

    async def refresh_info(self, replica: Replica) -> None:
        """Read the replica's models and server info. Raises on transport or HTTP errors."""
        models = await self.client.call(replica, "GET", "/v1/models")
        if models.status == 401:
            raise RuntimeError("/v1/models answered HTTP 401: check --upstream-token")
        if models.status != 200:
            raise RuntimeError(f"/v1/models answered HTTP {models.status}")
        apply_models(replica, models.json())
        info = await self.client.call(replica, "GET", "/server_info?config_format=json")
        replica.server_info = info.json() if info.status == 200 else None

    async def admit(self, replica: Replica) -> bool:
        """Bring ``replica`` in step (models, adapters, paused); True when it may take traffic."""
        try:
            for _ in range(_SYNC_ROUNDS):
                epoch = self.epoch
                await self.refresh_info(replica)
                await self._replay(replica)
                if epoch == self.epoch:
                    return True
        except SYNC_ERRORS as exc:
            error = f"sync failed: {exc}"
            if error != replica.last_error:  # say it once, not on every probe
                log.warning("replica %s not admitted: %s", replica.id, error)
            replica.last_error = error
            return False
        return False

    async def _replay(self, replica: Replica) -> None:
        for name, path in list(self.adapters.items()):
            if replica.adapters.get(name) == path:
                continue
            body = orjson.dumps({"lora_name": name, "lora_path": path, "load_inplace": False})
            reply = await self.client.call(replica, "POST", "/v1/load_lora_adapter", body=body)
            if reply.status != 200:
                raise RuntimeError(f"replaying adapter {name} answered HTTP {reply.status}")
            replica.adapters[name] = path
            log.info("replica %s: replayed adapter %s", replica.id, name)
        if self.pause_query is not None:
            reply = await self.client.call(replica, "POST", "/pause" + self.pause_query)
            if reply.status != 200:
                raise RuntimeError(f"replaying pause answered HTTP {reply.status}")


def apply_models(replica: Replica, listing: Any) -> None:
    """Update the replica's base model and adapters from a vLLM ``/v1/models`` answer."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        raise RuntimeError("/v1/models answer has no 'data' list")
    adapters: dict[str, str] = {}
    base: dict[str, Any] | None = None
    for entry in data:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        if entry.get("parent") is not None:
            adapters[entry["id"]] = str(entry.get("root") or "")
        elif base is None:
            base = entry
    if base is None:
        raise RuntimeError("/v1/models lists no base model")
    length = base.get("max_model_len")
    replica.base_model = base["id"]
    replica.max_model_len = length if isinstance(length, int) else None
    replica.adapters = adapters
    replica.model_entries = [e for e in data if isinstance(e, dict)]
