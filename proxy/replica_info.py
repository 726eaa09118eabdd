"""Reading a replica's own view: its models (base and adapters) and its server info."""

from __future__ import annotations

from typing import Any

from proxy.client import UpstreamClient
from proxy.upstreams import Replica


async def refresh_info(client: UpstreamClient, replica: Replica) -> None:
    """Read the replica's models and server info. Raises SYNC_ERRORS on failure."""
    models = await client.call(replica, "GET", "/v1/models")
    if models.status == 401:
        raise RuntimeError("/v1/models answered HTTP 401: check --upstream-token")
    if models.status != 200:
        raise RuntimeError(f"/v1/models answered HTTP {models.status}")
    apply_models(replica, models.json())
    info = await client.call(replica, "GET", "/server_info?config_format=json")
    replica.server_info = info.json() if info.status == 200 else None


def max_loras(replica: Replica) -> int | None:
    """``lora_config.max_loras`` from the replica's server info, if it reported one."""
    config = (replica.server_info or {}).get("vllm_config")
    lora = config.get("lora_config") if isinstance(config, dict) else None
    value = lora.get("max_loras") if isinstance(lora, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
