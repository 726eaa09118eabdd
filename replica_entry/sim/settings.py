"""Settings of the simulated vLLM replica: one frozen object built at the edge.

``SimSettings`` holds every knob of the command line; ``Faults`` is the part that tests may
change at run time (``POST /sim/faults`` replaces it with a validated merge). Both are strict:
a JSON ``"true"`` is not a bool and ``"500"`` is not a status, so a typo in a fault fails loudly
instead of turning into a surprising value.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

# The ranks vLLM's ``--max-lora-rank`` accepts (vllm.config.lora).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class Faults(BaseModel):
    """Failures a test can inject into one replica.

    unhealthy: ``GET /health`` answers 503.
    delay_s: extra seconds before a generation request starts.
    fail_status: generation routes answer this status with a vLLM-shaped error body.
    fail_model: with ``fail_status``, only requests for this model (e.g. one run's adapter) fail.
    drop_mid_response: generation responses send headers and part of the body, then the
        connection is closed.
    mount_lag_s: an adapter directory becomes visible only this long after its mtime/ctime.
    policy: ``honest`` answers an adapter's name with that adapter's policy; ``base`` with the
        base model's, ``previous`` with the adapter loaded before it (``sim.policy``): a load
        acknowledged, its policy not served.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    unhealthy: bool = False
    delay_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    fail_status: int | None = Field(default=None, ge=400, le=599)
    fail_model: str | None = None
    drop_mid_response: bool = False
    mount_lag_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    policy: Literal["honest", "base", "previous"] = "honest"

    def merged(self, patch: dict[str, Any]) -> Faults:
        """A new ``Faults`` with ``patch`` applied; raises ``ValidationError`` naming the field."""
        return Faults.model_validate({**self.model_dump(), **patch})


class SimSettings(BaseModel):
    """Everything a simulated replica is configured with (see ``replica_entry.cli``).

    Latency knobs (``*_s``, ``batch_factor``) are zero by default so tests run fast; the model
    is ``time = (overhead_s + uncached_prompt_tokens * prompt_token_s + generated_tokens *
    gen_token_s) * (1 + batch_factor * other_running_requests) + faults.delay_s``, where a
    request for adapter version ``later_version`` or newer (``trl-policy-vN``) takes
    ``later_gen_token_s`` per token instead (``sim.latency``: completions that shrink or grow as
    the run trains; both or neither).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str = Field(default="sim-model", min_length=1)
    max_model_len: int = Field(default=4096, ge=1)
    max_loras: int = Field(default=6, ge=1)
    max_lora_rank: int = 8
    max_cpu_loras: int | None = None
    block_size: int = Field(default=16, ge=1)
    cache_blocks: int = Field(default=4096, ge=0)
    max_num_seqs: int = Field(default=0, ge=0)  # 0: no limit
    kv_blocks: int = Field(default=0, ge=0)  # KV capacity for running requests; 0: no limit
    api_key: str | None = None
    seed: int = 0
    prompt_token_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    gen_token_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    overhead_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    batch_factor: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    later_version: int | None = Field(default=None, ge=1)
    later_gen_token_s: float | None = Field(
        default=None, ge=0.0, allow_inf_nan=False, validate_default=True
    )
    vocab_size: int = Field(default=1000, ge=2)
    # The adapter receiver (``adapter_receiver.wire``'s routes), as replica_entry installs it in
    # vLLM: its store is a fresh directory per process unless ``adapter_store`` names one (then
    # emptied at start); files there are visible at once (``mount_lag_s`` is the mount's only).
    adapter_receiver: bool = True
    adapter_store: str | None = None
    adapter_max_bytes: int = Field(default=1 << 30, ge=1)
    adapter_store_max_bytes: int = Field(default=8 << 30, ge=1)
    faults: Faults = Faults()

    @field_validator("max_lora_rank")
    @classmethod
    def _known_rank(cls, value: int) -> int:
        if value not in LORA_RANKS:
            raise ValueError(f"must be one of {', '.join(map(str, LORA_RANKS))}")
        return value

    @field_validator("max_cpu_loras")
    @classmethod
    def _cpu_loras_cover_gpu(cls, value: int | None, info: ValidationInfo) -> int | None:
        max_loras = info.data.get("max_loras")
        if value is not None and max_loras is not None and value < max_loras:
            raise ValueError(f"must be >= max_loras ({max_loras})")
        return value

    @field_validator("later_gen_token_s")
    @classmethod
    def _later_both_or_neither(cls, value: float | None, info: ValidationInfo) -> float | None:
        if (value is None) != (info.data.get("later_version") is None):
            raise ValueError("goes with later_version (--later-version): give both, or neither")
        return value

    @field_validator("api_key")
    @classmethod
    def _empty_key_is_no_key(cls, value: str | None) -> str | None:
        return value or None

    @property
    def effective_max_cpu_loras(self) -> int:
        """vLLM reports ``max_cpu_loras = max_loras`` when the flag is not given."""
        return self.max_loras if self.max_cpu_loras is None else self.max_cpu_loras
