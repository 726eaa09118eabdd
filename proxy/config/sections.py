"""The settings' sections: what each component receives, and what ``--help`` says of each field.

A section field's alias is its flat setting name (no alias: not a setting; code may still set
it); its ``description`` is the flag's help line, ``json_schema_extra`` carries what a type
cannot say: ``unset`` (what None means, when it is computed) and ``metavar``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from proxy.config.specs import split_bucket
from proxy.config.units import Bytes, QuickSeconds, Seconds
from proxy.routing.peek import DEFAULT_MAX_ELEMENTS

PositiveSeconds = Annotated[Seconds, Field(gt=0)]
# A probe's, an interval's or a connect time's: a bare number above 300 is refused (units.QUICK).
QuickPositiveSeconds = Annotated[QuickSeconds, Field(gt=0)]
MIB = 1 << 20
_SECTION = ConfigDict(frozen=True, populate_by_name=True)


class HealthSettings(BaseModel):
    """Active health probing of each replica's ``/health``."""

    model_config = _SECTION
    interval_s: QuickPositiveSeconds = Field(
        1.0, alias="health_interval", description="time between /health probes of each replica"
    )
    timeout_s: QuickPositiveSeconds = Field(
        2.0, alias="health_timeout", description="a probe not answered within this fails"
    )
    eject_after: int = Field(
        3, ge=1, alias="eject_after", description="consecutive failed probes that eject a replica"
    )
    readmit_after: int = Field(
        2, ge=1, alias="readmit_after", description="consecutive good probes that readmit it"
    )
    info_refresh_s: PositiveSeconds = Field(
        30.0,
        alias="info_refresh",
        description="time between re-reads of each healthy replica's info (models, max_loras)",
    )


class LimitSettings(BaseModel):
    """In-flight caps and the bounded FIFO wait queue."""

    model_config = _SECTION
    max_inflight_per_replica: int = Field(
        128, ge=1, alias="max_inflight_per_replica", description="requests in flight per replica"
    )
    max_inflight: Annotated[int, Field(ge=1)] | None = Field(
        None,
        alias="max_inflight",
        description="overall in-flight cap",
        json_schema_extra={"unset": "per-replica cap x replicas"},
    )
    queue_size: int = Field(
        4096, ge=0, alias="queue_size", description="requests that may wait for a slot; then 503"
    )
    queue_timeout_s: PositiveSeconds = Field(
        60.0, alias="queue_timeout", description="how long a request may wait for a slot; then 503"
    )


class UpstreamSettings(BaseModel):
    """How the proxy talks to replicas."""

    model_config = _SECTION
    token: SecretStr | None = Field(
        None,
        alias="upstream_token",
        description="bearer token added to every upstream request (HF Jobs ports need one)",
        json_schema_extra={"metavar": "TOKEN"},
    )
    connect_timeout_s: QuickPositiveSeconds = Field(
        5.0, alias="connect_timeout", description="time to open a connection to a replica"
    )
    request_timeout_s: PositiveSeconds = Field(
        900.0, alias="request_timeout", description="time a replica may take over one request"
    )
    max_connects_per_replica: int = Field(
        32,
        ge=1,
        le=4096,
        alias="max_connects_per_replica",
        description="connections being opened to one replica at once; more requests wait at the "
        "proxy for one, or for a kept-alive connection to come free (a burst queues here, not in "
        "the replica's accept queue)",
    )
    ca_bundle: Path | None = Field(
        None,
        alias="ca_bundle",
        description="CA certificates to verify https:// replicas with",
        json_schema_extra={"unset": "the system's store"},
    )
    tls_verify: bool = Field(
        True, alias="tls_verify", description="verify https:// replicas' certificates"
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=16,
        alias="max_attempts",
        description="replicas tried when a connection fails before the first byte",
    )
    max_stream_migrations: int = Field(
        2,
        ge=0,
        le=16,
        alias="max_stream_migrations",
        description="times a stream is continued on another replica when its replica fails "
        "mid-stream (0: the stream is cut, as vLLM cuts it)",
    )
    gateway_failures: int = Field(
        5,
        ge=1,
        alias="gateway_failures",
        description="failed connects or dropped connections of requests in a row that eject a "
        "replica (one is load, not death; its health probes eject one that is down)",
    )
    max_ejection_percent: float = Field(
        10.0,
        gt=0,
        le=100,
        alias="max_ejection_percent",
        description="the most of the fleet request failures may eject at once (at least one "
        "replica); failed health probes eject whatever the share",
    )
    breaker_failures: int = Field(
        5,
        ge=1,
        alias="breaker_failures",
        description="consecutive 5xx answers that open a replica's circuit",
    )
    breaker_cooldown_s: PositiveSeconds = Field(
        10.0, alias="breaker_cooldown", description="how long an open circuit keeps its replica out"
    )
    max_answer_bytes: Bytes = Field(
        256 * MIB, ge=1024, alias="max_answer_bytes", description="largest answer read whole"
    )


class ClientSettings(BaseModel):
    """What one client (or many) may cost the proxy: connections, time, memory, CPU."""

    model_config = _SECTION
    max_connections: int = Field(
        4096, ge=1, alias="max_client_connections", description="client connections held at once"
    )
    keepalive_timeout_s: PositiveSeconds = Field(
        75.0, alias="client_keepalive_timeout", description="an idle client connection closes"
    )
    head_timeout_s: QuickPositiveSeconds = Field(
        10.0,
        alias="client_head_timeout",
        description="time for a request head from its first byte (else 408)",
    )
    body_timeout_s: PositiveSeconds = Field(
        60.0, alias="client_body_timeout", description="time for a request body (else 408)"
    )
    send_timeout_s: PositiveSeconds = Field(
        60.0,
        alias="client_send_timeout",
        description="a client that stops reading its answer this long is dropped",
    )
    max_body_bytes: Bytes = Field(
        32 * MIB, ge=1024, alias="max_body_bytes", description="larger request bodies get 413"
    )
    max_body_bytes_in_flight: Bytes = Field(
        1024 * MIB,
        ge=1024,
        alias="max_body_bytes_in_flight",
        description="request bodies held at once (read, queued, forwarded); beyond it 503",
    )
    max_prompt_elements: int = Field(
        DEFAULT_MAX_ELEMENTS,
        ge=16,
        alias="max_prompt_elements",
        description="JSON arrays, objects and strings of a prompt the proxy walks; beyond it 400",
    )

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> ClientSettings:
        if self.max_body_bytes_in_flight < self.max_body_bytes:
            raise ValueError(
                "--max-body-bytes-in-flight must be at least --max-body-bytes "
                f"({self.max_body_bytes})"
            )
        return self


class AdapterSettings(BaseModel):
    """Sources, load retries, pushing to replica receivers, the proxy's own receiver, and the
    mirror (``proxy.adapters.mirror``: TRL saves into ``local``, each version copied to ``mirror``).
    """

    model_config = _SECTION
    dir: Path | None = Field(
        None, alias="adapters_dir", description="watch TRL's <output_dir>/.vllm_lora on a mount"
    )
    bucket: str | None = Field(
        None,
        alias="adapters_bucket",
        description="or watch it through the Hub bucket API",
        json_schema_extra={"metavar": "NAMESPACE/BUCKET[/PREFIX]"},
    )
    mount_path: str = Field(
        "/lora", alias="adapters_mount", description="where replicas see the adapters' bucket"
    )
    watch_interval_s: PositiveSeconds | None = Field(
        None,
        alias="watch_interval",
        description="time between looks for new adapter versions",
        json_schema_extra={"unset": "0.5 s for a dir, 2 s for a bucket"},
    )
    window: Annotated[int, Field(ge=1)] | None = Field(
        None,
        alias="adapter_window",
        description="adapter versions kept loaded on each replica",
        json_schema_extra={"unset": "the smallest max_loras"},
    )
    load_deadline_s: PositiveSeconds = Field(
        60.0,
        alias="adapter_load_deadline",
        description="how long a load waits for a lagging mount before answering 504",
    )
    retry_min_s: PositiveSeconds = 0.05
    retry_max_s: PositiveSeconds = 0.25
    # Pushing: each version the proxy can read goes to every replica's receiver, then loads there
    # (a receiver that takes no byte for ``push_stall_s`` falls back to the mount path).
    push: bool = Field(
        True, alias="adapter_push", description="push each version to replicas' receivers"
    )
    push_buffer_bytes: Bytes = Field(
        64 * MIB,
        ge=MIB,
        alias="adapter_push_buffer",
        description="read-ahead of one push, shared by all its replicas",
    )
    push_rate: Annotated[Bytes, Field(ge=1)] | None = Field(
        None,
        alias="adapter_push_rate",
        description="bytes per second all pushes together may send",
        json_schema_extra={"unset": "no limit"},
    )
    push_stall_s: PositiveSeconds = Field(
        30.0,
        alias="adapter_push_stall",
        description="a receiver taking no byte this long: that replica loads from the mount",
    )
    store: Path | None = Field(
        None,
        alias="adapter_store",
        description="the proxy's own receiver's directory (emptied at start)",
        json_schema_extra={"unset": "<tmp>/rollout-proxy-<port>-adapters"},
    )
    store_max_adapter_bytes: Bytes = Field(
        1 << 30,
        ge=1,
        alias="adapter_max_bytes",
        description="largest adapter the store takes (rollout-replica's flag of the same name)",
    )
    store_max_bytes: Bytes = Field(
        8 << 30, ge=1, alias="adapter_store_max_bytes", description="all the store may hold"
    )
    local: Path | None = Field(
        None,
        alias="adapters_local",
        description="the directory TRL saves versions into here (with --adapters-mirror): pushed "
        "from there, each copied into the mirror in the background",
    )
    mirror: Path | None = Field(
        None,
        alias="adapters_mirror",
        description="the bucket directory each version in --adapters-local is copied into; "
        "replicas without a receiver load from there",
    )
    state_dir: Path | None = Field(
        None,
        alias="state_dir",
        description="where the adapter window is kept across the proxy's restarts",
        json_schema_extra={"unset": "<tmp>/rollout-proxy-<port>-state; none on port 0"},
    )
    state_max_age_s: PositiveSeconds = Field(
        3600.0,
        alias="state_max_age",
        description="a state file older than this is another run's: not adopted",
    )
    probe: bool = Field(
        True,
        alias="policy_probe",
        description="check that each replica serves the policy of each version it loads",
    )
    probe_tolerance: Annotated[float, Field(gt=0)] | None = Field(
        None,
        alias="probe_tolerance",
        description="mean gap (nats) a replica's probe answer may have to the trainer's",
        json_schema_extra={"unset": "by the replicas' dtype: float32 1e-3, bf16 0.05"},
    )
    probe_repeat: Annotated[int, Field(ge=1)] = Field(
        3,
        alias="probe_repeat",
        description="without a trainer's reference, versions a replica must look stale on "
        "before it is withheld",
    )
    probe_timeout_s: QuickPositiveSeconds = Field(
        15.0, alias="probe_timeout", description="a probe not answered within this is retried"
    )

    @model_validator(mode="after")
    def _one_source(self) -> AdapterSettings:
        if self.dir is not None and self.bucket is not None:
            raise ValueError("give --adapters-dir or --adapters-bucket, not both")
        if (self.local is None) != (self.mirror is None):
            raise ValueError("give --adapters-local and --adapters-mirror together, or neither")
        if self.bucket is not None:
            split_bucket(self.bucket)
        return self


class LoadSettings(BaseModel):
    """Scraping each replica's own load figures from its ``/metrics`` (``fleet.load``)."""

    model_config = _SECTION
    interval_s: QuickSeconds = Field(
        0.5,
        ge=0,
        alias="load_interval",
        description="time between scrapes of each replica's /metrics load figures (0: off)",
    )
    timeout_s: QuickPositiveSeconds = Field(
        1.0, alias="load_timeout", description="a scrape not answered within this fails"
    )
    stale_s: QuickPositiveSeconds = Field(
        2.0,
        alias="load_stale",
        description="figures this old count as stale (routing then uses its own estimate)",
    )
    kv_high: float = Field(
        0.9,
        gt=0,
        le=1,
        alias="kv_high",
        description="a replica reporting this KV-cache usage (0-1) is full: "
        "new work goes elsewhere",
        json_schema_extra={"metavar": "FRACTION"},
    )
    waiting_high: int = Field(
        8,
        ge=1,
        alias="waiting_high",
        description="... as is one reporting this many waiting, two scrapes in a row",
    )
