"""TRL's adapter calls: the load and unload requests, parsed once where they arrive, and what
carrying one out gave.

``parse_load`` and ``parse_unload`` read a body's ``lora_name`` (and ``lora_path``) into a typed
request or raise ``BadAdapterRequest`` (answered 400, naming the field): the edge parses, the
service (``proxy.adapters.service``) takes the typed request. ``LoadResult`` and
``UnloadResult`` are what the service returns. The HTTP edge (``proxy.http.responses``) turns a
result into its answer: a success, or one of the domain errors below (answered by the edge's
one table, ``proxy.http.errors``), which carry the per-replica outcomes as their ``details``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from adapter_receiver.wire import NAME_RULE, safe_name
from proxy.adapters.carry import LoadOutcome
from proxy.adapters.registry import Version
from proxy.errors import DomainError


class BadAdapterRequest(DomainError, ValueError):
    """A load or unload request that cannot be carried out as sent (answered 400)."""

    reason = "bad_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class _LoadFailed(DomainError):
    """A load not every routable replica took (rolled back where it was taken)."""

    def __init__(self, message: str, details: dict[str, Any], status: int | None = None) -> None:
        super().__init__(message)
        self.details = details
        self.status = status


class LoadRefused(_LoadFailed):
    """A load some replicas refused (a bad adapter, a full ``max_loras``); the answer has their
    status (the most common) and each replica's outcome."""

    reason = "replica_refused"


class LoadLagging(_LoadFailed):
    """A load whose adapter never became visible on some replicas' bucket mounts within
    ``--adapter-load-deadline`` (504, never 404: TRL reads 404 as "no runtime LoRA")."""

    reason = "mount_lagging"


class LoadUnreached(_LoadFailed):
    """A load no replica could be reached for."""

    reason = "upstream_failed"


class UnknownAdapter(DomainError):
    """An unload naming an adapter neither the proxy nor any replica has (vLLM's 404)."""

    reason = "unknown_adapter"

    def __init__(self, name: str) -> None:
        super().__init__(f"The lora adapter '{name}' cannot be found.")


MAX_PATH_CHARS = 4096  # a load's ``lora_path`` (Linux's PATH_MAX)


@dataclass(frozen=True, slots=True)
class LoadRequest:
    name: str  # ``lora_name``, as the replicas are to hold it
    path: str  # ``lora_path``


@dataclass(frozen=True, slots=True)
class LoadResult:
    version: Version
    outcomes: list[LoadOutcome]
    seconds: float
    deadline_s: float  # how long lagging mounts were waited for


@dataclass(frozen=True, slots=True)
class UnloadResult:
    name: str
    known: bool  # the proxy or a replica had it (else vLLM's 404 is the answer)


def parse_load(body: bytes) -> LoadRequest:
    """A load body's ``lora_name`` and ``lora_path``; ``BadAdapterRequest`` if not there."""
    return LoadRequest(*_parse(body, need_path=True))


def parse_unload(body: bytes) -> str:
    """An unload body's ``lora_name``; ``BadAdapterRequest`` if not there."""
    return _parse(body, need_path=False)[0]


def _parse(body: bytes, *, need_path: bool) -> tuple[str, str]:
    """``lora_name`` (and ``lora_path``) of a load or unload body; ``BadAdapterRequest`` if not."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadAdapterRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadAdapterRequest("request body must be a JSON object")
    name, path = data.get("lora_name"), data.get("lora_path", "")
    if not isinstance(name, str) or not name:
        raise BadAdapterRequest("'lora_name' must be a non-empty string", param="lora_name")
    adapter_name(name)
    if need_path and (not isinstance(path, str) or not path):
        raise BadAdapterRequest("'lora_path' must be a non-empty string", param="lora_path")
    if isinstance(path, str) and len(path) > MAX_PATH_CHARS:
        raise BadAdapterRequest(
            f"'lora_path' must be at most {MAX_PATH_CHARS} characters", param="lora_path"
        )
    return name, path if isinstance(path, str) else ""


def adapter_name(name: str) -> str:
    """``name`` when it is one (``adapter_receiver.wire.NAME_RULE``, the rule every replica's
    receiver holds names to); ``BadAdapterRequest`` naming the rule if not."""
    if not safe_name(name):
        shown = name[:80] + ("..." if len(name) > 80 else "")
        raise BadAdapterRequest(f"'lora_name' {shown!r} must be {NAME_RULE}", param="lora_name")
    return name
