"""Policy settings: a discriminated union on ``kind``, one model per policy.

Defaults are defined once, next to what they configure (``keys.KeySettings``,
``hashring.DEFAULT_VNODES``), and read from there.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.routing.hashring import DEFAULT_VNODES
from proxy.routing.keys import KeySettings

_KEYS = KeySettings()


class PrefixSettings(BaseModel):
    """Consistent hashing on the conversation prefix with bounded loads (the default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["prefix"] = "prefix"
    load_factor: Annotated[float, Field(ge=1.0)] = 1.25
    load_slack: Annotated[int, Field(ge=0)] = 8
    vnodes: Annotated[int, Field(ge=1, le=4096)] = DEFAULT_VNODES
    sticky_size: Annotated[int, Field(ge=0)] = 65_536
    block_tokens: Annotated[int, Field(ge=1)] = _KEYS.block_tokens
    chunk_bytes: Annotated[int, Field(ge=8)] = _KEYS.chunk_bytes
    template_threshold: Annotated[int, Field(ge=1)] = _KEYS.threshold
    max_tracked: Annotated[int, Field(ge=16)] = _KEYS.max_tracked

    def key_settings(self) -> KeySettings:
        return KeySettings(
            block_tokens=self.block_tokens,
            chunk_bytes=self.chunk_bytes,
            threshold=self.template_threshold,
            max_tracked=self.max_tracked,
        )


class LeastLoadedSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["least_loaded"] = "least_loaded"


class RoundRobinSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["round_robin"] = "round_robin"


AnyPolicySettings = PrefixSettings | LeastLoadedSettings | RoundRobinSettings
PolicySettings = Annotated[AnyPolicySettings, Field(discriminator="kind")]
