"""Reading a replica's own view: its models (base and adapters) and its server info.

``parse_models`` is pure (a vLLM ``/v1/models`` answer -> what the pool records);
``refresh_info`` asks the replica and records what it lists of itself (``Replica.listing``, of
which this module is the one writer), and returns the adapters it lists: those are its agent's
to record (``proxy.adapters.held``), and only the agent calls it, in its own turn, so a listing
never overwrites a load the agent has just confirmed. ``FleetInfo`` does that for the proxy and
keeps what the listings add up to: the base models seen and the fleet's smallest ``max_loras`` (the
adapter window's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Listing, Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import ReplyError


@dataclass(frozen=True, slots=True)
class Models:
    base_model: str
    max_model_len: int | None
    adapters: dict[str, str]  # lora name -> path (vLLM's ``root``)
    entries: list[dict[str, Any]]


async def refresh_info(
    client: UpstreamClient, pool: ReplicaPool, replica: Replica
) -> dict[str, str]:
    """Read the replica's models and server info; returns its adapters (name -> path).
    Raises ``UpstreamError`` on failure."""
    models = await client.call(replica, "GET", "/v1/models")
    if models.status == 401:
        raise ReplyError("/v1/models answered HTTP 401: check --upstream-token")
    if models.status != 200:
        raise ReplyError(f"/v1/models answered HTTP {models.status}")
    parsed = parse_models(models.json())
    info = await client.call(replica, "GET", "/server_info?config_format=json")
    replica.listing = Listing(
        parsed.base_model,
        parsed.max_model_len,
        tuple(parsed.entries),
        info.json() if info.status == 200 else None,
    )
    pool.refresh()
    return parsed.adapters


class FleetInfo:
    def __init__(self, client: UpstreamClient, pool: ReplicaPool) -> None:
        self._client = client
        self._pool = pool
        self.bases: set[str] = set()  # base models replicas have listed

    async def refresh(self, replica: Replica) -> dict[str, str]:
        """Re-read ``replica``'s models and server info; its adapters (name -> path).
        Raises ``UpstreamError``."""
        adapters = await refresh_info(self._client, self._pool, replica)
        if replica.base_model is not None:
            self.bases.add(replica.base_model)
        return adapters

    def smallest_max_loras(self) -> int | None:
        """The smallest ``max_loras`` any replica reported (None: none reported one)."""
        limits = [m for m in map(max_loras, self._pool) if m is not None]
        return min(limits) if limits else None


def max_loras(replica: Replica) -> int | None:
    """``lora_config.max_loras`` from the replica's server info, if it reported one."""
    config = (replica.server_info or {}).get("vllm_config")
    lora = config.get("lora_config") if isinstance(config, dict) else None
    value = lora.get("max_loras") if isinstance(lora, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_models(listing: Any) -> Models:
    """The base model and adapters in a vLLM ``/v1/models`` answer; ``ReplyError`` if malformed."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        raise ReplyError("/v1/models answer has no 'data' list")
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
        raise ReplyError("/v1/models lists no base model")
    length = base.get("max_model_len")
    return Models(
        base_model=base["id"],
        max_model_len=length if isinstance(length, int) else None,
        adapters=adapters,
        entries=[e for e in data if isinstance(e, dict)],
    )
