"""Adapter settings: where versions come from, how loads are carried out, how bytes are pushed.

``proxy.config`` nests this model under ``Settings.adapters`` and maps the flat flag names onto
it; the defaults live here, next to what they configure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

PositiveFloat = Annotated[float, Field(gt=0)]
MIB = 1 << 20


class AdapterSettings(BaseModel):
    """Sources, load retries, pushing to replica receivers and the proxy's own receiver."""

    model_config = ConfigDict(frozen=True)

    dir: Path | None = None
    bucket: str | None = None
    mount_path: str = "/lora"
    watch_interval_s: PositiveFloat | None = None  # default 0.5 s (dir) or 2 s (bucket)
    window: Annotated[int, Field(ge=1)] | None = None  # default: smallest max_loras - 1
    load_deadline_s: PositiveFloat = 60.0
    retry_min_s: PositiveFloat = 0.05
    retry_max_s: PositiveFloat = 0.25
    # Pushing: each version the proxy can read goes to every replica's receiver, then loads there.
    push: bool = True
    push_buffer_bytes: Annotated[int, Field(ge=MIB)] = 64 * MIB  # one push's read-ahead
    push_rate: Annotated[int, Field(ge=1)] | None = None  # bytes/s, all replicas together
    push_stall_s: PositiveFloat = 30.0  # a receiver that takes no byte this long: mount path
    # The proxy's own receiver (a relay pushes there; Hub downloads land there too).
    store: Path | None = None  # default: <tmp>/rollout-proxy-<port>-adapters, emptied at start
    store_max_adapter_bytes: Annotated[int, Field(ge=1)] = 1 << 30
    store_max_bytes: Annotated[int, Field(ge=1)] = 8 << 30

    @model_validator(mode="after")
    def _one_source(self) -> AdapterSettings:
        if self.dir is not None and self.bucket is not None:
            raise ValueError("give --adapters-dir or --adapters-bucket, not both")
        if self.bucket is not None:
            split_bucket(self.bucket)
        return self


def split_bucket(spec: str) -> tuple[str, str]:
    """``NAMESPACE/BUCKET[/PREFIX]`` -> (``NAMESPACE/BUCKET``, ``PREFIX``); ValueError if not."""
    parts = spec.strip("/").split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise ValueError(f"--adapters-bucket {spec!r} must look like NAMESPACE/BUCKET[/PREFIX]")
    return "/".join(parts[:2]), "/".join(parts[2:])
