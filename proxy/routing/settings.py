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
    load_factor: Annotated[float, Field(ge=1.0)] = Field(
        1.25,
        description="prefix policy: spill above this x the mean load (and the slack)",
        json_schema_extra={"metavar": "FACTOR"},
    )
    load_slack: Annotated[int, Field(ge=0)] = Field(
        8, description="prefix policy: ... and this many requests' work over the least loaded"
    )
    vnodes: Annotated[int, Field(ge=1, le=4096)] = Field(
        DEFAULT_VNODES, description="prefix policy: points per replica on the hash ring"
    )
    sticky_size: Annotated[int, Field(ge=0)] = Field(
        65_536, description="prefix policy: keys whose replica is remembered"
    )
    block_tokens: Annotated[int, Field(ge=1)] = Field(
        _KEYS.block_tokens, description="prefix policy: tokens per block of a prompt's key"
    )
    chunk_bytes: Annotated[int, Field(ge=8)] = Field(
        _KEYS.chunk_bytes, description="prefix policy: bytes per block of a text prompt's key"
    )
    template_threshold: Annotated[int, Field(ge=1)] = Field(
        _KEYS.threshold,
        description="prefix policy: next blocks seen before a block counts as template",
    )
    max_tracked: Annotated[int, Field(ge=16)] = Field(
        _KEYS.max_tracked, description="prefix policy: template candidates remembered"
    )

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
