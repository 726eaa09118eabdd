"""Views of the fleet: what TRL reads as one server, and each replica's status.

What TRL reads as one server: ``/health``, ``/server_info`` and ``/v1/models`` of the fleet.

- ``/health``: 200 while at least one replica can take requests; the body says which are down.
- ``/server_info``: the first routable replica's answer with ``data_parallel_size`` 1 (TRL would
  otherwise fall back to NCCL weight sync) and the smallest ``max_loras``/``max_lora_rank``/
  ``max_cpu_loras`` of the routable replicas; ``lora_config`` is null unless every one has LoRA.
- ``/v1/models``: the base model first (TRL reads ``data[0].max_model_len``), then each adapter
  loaded on any routable replica, once; an adapter the client loaded through the proxy shows the
  path the client gave (``roots``), as one vLLM would, not a replica's pushed copy.

``replica_status``: one replica as ``/proxy/status`` and ``/admin/replicas`` show it (a drained
replica says ``draining`` there as in ``/health``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica

_LORA_LIMITS = ("max_loras", "max_lora_rank", "max_cpu_loras")


def health(pool: ReplicaPool) -> tuple[int, dict[str, Any]]:
    routable = pool.routable()
    down = {r.id: {"state": r.state, "error": r.last_error} for r in pool if not r.routable}
    status = 200 if routable else 503
    body = {
        "status": "ok" if routable else "unavailable",
        "routable": len(routable),
        "replicas": len(pool),
        "down": down,
    }
    return status, body


def server_info(pool: ReplicaPool) -> dict[str, Any] | None:
    infos = [r.server_info for r in pool.routable() if r.server_info is not None]
    if not infos:
        return None
    merged = copy.deepcopy(infos[0])
    config = merged.get("vllm_config")
    if not isinstance(config, dict):
        return merged
    parallel = config.setdefault("parallel_config", {})
    if isinstance(parallel, dict):
        parallel["data_parallel_size"] = 1
    loras = [_lora_config(info) for info in infos]
    if any(lora is None for lora in loras):
        config["lora_config"] = None
    else:
        merged_lora = config["lora_config"]
        for key in _LORA_LIMITS:
            values = [lora[key] for lora in loras if lora is not None and _is_int(lora.get(key))]
            if values:
                merged_lora[key] = min(values)
    return merged


def _lora_config(info: dict[str, Any]) -> dict[str, Any] | None:
    config = info.get("vllm_config")
    lora = config.get("lora_config") if isinstance(config, dict) else None
    return lora if isinstance(lora, dict) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def models(pool: ReplicaPool, roots: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    routable = [r for r in pool.routable() if r.listing.entries]
    if not routable:
        return None
    base = next(e for e in routable[0].listing.entries if e.get("parent") is None)
    data: list[dict[str, Any]] = [base]
    seen = {base.get("id")}
    for replica in routable:
        listed = {e.get("id"): e for e in replica.listing.entries}
        for name, path in replica.adapters.items():
            if name not in seen:
                seen.add(name)
                entry = listed.get(name) or _adapter_entry(name, path, base)
                if roots and name in roots:
                    entry = {**entry, "root": roots[name]}
                data.append(entry)
    return {"object": "list", "data": data}


def _adapter_entry(name: str, path: str, base: dict[str, Any]) -> dict[str, Any]:
    """An adapter's ``/v1/models`` entry in vLLM's shape (for adapters loaded since the listing)."""
    return {
        "id": name,
        "object": "model",
        "created": base.get("created"),
        "owned_by": base.get("owned_by", "vllm"),
        "root": path,
        "parent": base.get("id"),
        "max_model_len": None,
        "permission": base.get("permission", []),
    }


def replica_status(replica: Replica) -> dict[str, Any]:
    return {
        "id": replica.id,
        "url": replica.url,
        "state": replica.state,
        "routable": replica.routable,
        "draining": replica.draining,
        "inflight": replica.inflight,
        "cost": round(replica.cost, 1),
        "reported": None if replica.reported is None else dataclasses.asdict(replica.reported),
        "base_model": replica.base_model,
        "max_model_len": replica.max_model_len,
        "adapters": sorted(replica.adapters),
        # The content digest (first 12 hex) of each adapter it is routed for.
        "digests": {name: digest[:12] for name, digest in sorted(replica.digests.items())},
        "last_error": replica.last_error,
    }
