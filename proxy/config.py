"""Settings: one object, built once at the edge from flags, environment and a config file.

Precedence, highest first: command-line flags, ``PROXY_*`` environment variables, the file named by
``--config``/``PROXY_CONFIG`` (TOML or JSON), the defaults below. Every field is validated at start;
a bad value stops start-up with a message naming the field, the value and what is allowed.
Secrets are ``SecretStr``: their values never reach a repr, a log line or an error message.

Components receive their own section, all defined here. Users name each setting flat
(``--health-interval``, ``PROXY_HEALTH_INTERVAL``, ``health_interval`` in the file): a section
field's alias, a policy field's own name. Imports only ``proxy.routing`` of the proxy.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from proxy.routing.peek import DEFAULT_MAX_ELEMENTS
from proxy.routing.settings import PolicySettings, PrefixSettings

PositiveFloat = Annotated[float, Field(gt=0)]
MIB = 1 << 20
# A section field's alias is its flat setting name (none: not a setting); code may use fields.
_SECTION = ConfigDict(frozen=True, populate_by_name=True)


class HealthSettings(BaseModel):
    """Active health probing of each replica's ``/health``."""

    model_config = _SECTION
    interval_s: PositiveFloat = Field(1.0, alias="health_interval")
    timeout_s: PositiveFloat = Field(2.0, alias="health_timeout")
    eject_after: int = Field(3, ge=1, alias="eject_after")
    readmit_after: int = Field(2, ge=1, alias="readmit_after")
    info_refresh_s: PositiveFloat = Field(30.0, alias="info_refresh")


class LimitSettings(BaseModel):
    """In-flight caps and the bounded FIFO wait queue."""

    model_config = _SECTION
    max_inflight_per_replica: int = Field(128, ge=1, alias="max_inflight_per_replica")
    max_inflight: Annotated[int, Field(ge=1)] | None = Field(None, alias="max_inflight")
    queue_size: int = Field(4096, ge=0, alias="queue_size")
    queue_timeout_s: PositiveFloat = Field(60.0, alias="queue_timeout")


class UpstreamSettings(BaseModel):
    """How the proxy talks to replicas."""

    model_config = _SECTION
    token: SecretStr | None = Field(None, alias="upstream_token")
    connect_timeout_s: PositiveFloat = Field(5.0, alias="connect_timeout")
    request_timeout_s: PositiveFloat = Field(900.0, alias="request_timeout")
    ca_bundle: Path | None = Field(None, alias="ca_bundle")
    tls_verify: bool = Field(True, alias="tls_verify")
    max_attempts: int = Field(3, ge=1, le=16, alias="max_attempts")
    breaker_failures: int = Field(5, ge=1, alias="breaker_failures")
    breaker_cooldown_s: PositiveFloat = Field(10.0, alias="breaker_cooldown")
    max_answer_bytes: int = Field(256 * MIB, ge=1024, alias="max_answer_bytes")


class ClientSettings(BaseModel):
    """What one client (or many) may cost the proxy: connections, time, memory, CPU."""

    model_config = _SECTION
    max_connections: int = Field(4096, ge=1, alias="max_client_connections")
    keepalive_timeout_s: PositiveFloat = Field(75.0, alias="client_keepalive_timeout")
    head_timeout_s: PositiveFloat = Field(10.0, alias="client_head_timeout")
    body_timeout_s: PositiveFloat = Field(60.0, alias="client_body_timeout")
    send_timeout_s: PositiveFloat = Field(60.0, alias="client_send_timeout")
    max_body_bytes: int = Field(32 * MIB, ge=1024, alias="max_body_bytes")
    max_body_bytes_in_flight: int = Field(1024 * MIB, ge=1024, alias="max_body_bytes_in_flight")
    max_prompt_elements: int = Field(DEFAULT_MAX_ELEMENTS, ge=16, alias="max_prompt_elements")

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

    Unset, ``watch_interval_s`` is 0.5 s (dir) or 2 s (bucket); ``window`` the smallest
    ``max_loras`` - 1; ``store`` ``<tmp>/rollout-proxy-<port>-adapters``, emptied at start."""

    model_config = _SECTION
    dir: Path | None = Field(None, alias="adapters_dir")
    bucket: str | None = Field(None, alias="adapters_bucket")
    mount_path: str = Field("/lora", alias="adapters_mount")
    watch_interval_s: PositiveFloat | None = Field(None, alias="watch_interval")
    window: Annotated[int, Field(ge=1)] | None = Field(None, alias="adapter_window")
    load_deadline_s: PositiveFloat = Field(60.0, alias="adapter_load_deadline")
    retry_min_s: PositiveFloat = 0.05
    retry_max_s: PositiveFloat = 0.25
    # Pushing: each version the proxy can read goes to every replica's receiver, then loads there
    # (``push_rate``: bytes/s, all replicas together; a receiver that takes no byte for
    # ``push_stall_s`` falls back to the mount path).
    push: bool = Field(True, alias="adapter_push")
    push_buffer_bytes: int = Field(64 * MIB, ge=MIB, alias="adapter_push_buffer")  # read-ahead
    push_rate: Annotated[int, Field(ge=1)] | None = Field(None, alias="adapter_push_rate")
    push_stall_s: PositiveFloat = Field(30.0, alias="adapter_push_stall")
    # The proxy's own receiver (a relay pushes there; Hub downloads land there too).
    store: Path | None = Field(None, alias="adapter_store")
    store_max_adapter_bytes: int = Field(1 << 30, ge=1, alias="adapter_store_max_adapter_bytes")
    store_max_bytes: int = Field(8 << 30, ge=1, alias="adapter_store_max_bytes")
    local: Path | None = Field(None, alias="adapters_local")
    mirror: Path | None = Field(None, alias="adapters_mirror")

    @model_validator(mode="after")
    def _one_source(self) -> AdapterSettings:
        if self.dir is not None and self.bucket is not None:
            raise ValueError("give --adapters-dir or --adapters-bucket, not both")
        if (self.local is None) != (self.mirror is None):
            raise ValueError("give --adapters-local and --adapters-mirror together, or neither")
        if self.bucket is not None:
            split_bucket(self.bucket)
        return self


def split_bucket(spec: str) -> tuple[str, str]:
    """``NAMESPACE/BUCKET[/PREFIX]`` -> (``NAMESPACE/BUCKET``, ``PREFIX``); ValueError if not."""
    parts = spec.strip("/").split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise ValueError(f"--adapters-bucket {spec!r} must look like NAMESPACE/BUCKET[/PREFIX]")
    return "/".join(parts[:2]), "/".join(parts[2:])


class LoadSettings(BaseModel):
    """Scraping each replica's own load figures from its ``/metrics`` (``fleet.load``)."""

    model_config = _SECTION
    interval_s: float = Field(0.5, ge=0, alias="load_interval")  # 0: do not scrape
    timeout_s: PositiveFloat = Field(1.0, alias="load_timeout")
    stale_s: PositiveFloat = Field(2.0, alias="load_stale")
    kv_high: float = Field(0.9, gt=0, le=1, alias="kv_high")
    waiting_high: int = Field(8, ge=1, alias="waiting_high")  # more than one group's burst


@dataclass(frozen=True)
class JobsLabel:
    """``hf-jobs:LABEL=VALUE``: the RUNNING jobs carrying that label, by their exposed URLs."""

    label: str
    value: str


@dataclass(frozen=True)
class DnsName:
    """``dns:NAME:PORT``: every address NAME resolves to, over plain HTTP on PORT (an HF Jobs
    network group's alias: ``${HF_NETWORK_GROUP_PREFIX}replica``)."""

    name: str
    port: int


def parse_discover_spec(spec: str) -> JobsLabel | DnsName:
    """``--discover`` -> what ``proxy.fleet.discovery`` looks up; ValueError naming the fault."""
    kind, _, selector = spec.partition(":")
    if kind == "hf-jobs":
        label, _, value = selector.partition("=")
        if label and value:
            return JobsLabel(label, value)
    elif kind == "dns":
        name, _, port = selector.rpartition(":")
        name = name.strip("[]")
        if name and port.isdigit() and 0 < int(port) <= 65535 and name.isprintable():
            return DnsName(name, int(port))
    raise ValueError(f"--discover {spec!r} must look like hf-jobs:LABEL=VALUE or dns:NAME:PORT")


class Settings(BaseSettings):
    """Everything the proxy is configured with. Components receive their own section."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, validate_default=True)

    replicas: Annotated[list[str], NoDecode] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    api_key: SecretStr | None = None
    admin_key: SecretStr | None = None
    shutdown_timeout: Annotated[float, Field(ge=0)] = 30.0
    supervise: bool = False
    # Send TRL's /pause and /resume to the replicas (freezing every running request for the
    # sync) instead of answering them from the proxy's state (proxy.dataplane.fanout).
    forward_pause: bool = False
    access_log: bool = False
    otel_spans: bool = False
    advice_window: PositiveFloat = 60.0
    policy: PolicySettings = PrefixSettings()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    config: Path | None = None
    discover: str | None = None
    discover_interval: PositiveFloat = 5.0
    discover_namespace: str | None = None
    # Hosts the admin API may add as replicas (fnmatch patterns); empty: proxy.fleet.hosts's.
    replica_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    hub_endpoint: str | None = None
    health: HealthSettings = HealthSettings()
    limits: LimitSettings = LimitSettings()
    upstream: UpstreamSettings = UpstreamSettings()
    client: ClientSettings = ClientSettings()
    adapters: AdapterSettings = AdapterSettings()
    load: LoadSettings = LoadSettings()

    @field_validator("replicas", "replica_hosts", mode="before")
    @classmethod
    def _split_replicas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("replicas")
    @classmethod
    def _check_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            check_replica_url(url)
        return [url.rstrip("/") for url in urls]

    @field_validator("discover")
    @classmethod
    def _check_discover(cls, spec: str | None) -> str | None:
        if spec is not None:
            parse_discover_spec(spec)
        return spec

    @property
    def discover_source(self) -> JobsLabel | DnsName | None:
        """What ``--discover`` names (checked when the settings were read)."""
        return None if self.discover is None else parse_discover_spec(self.discover)

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_fields(cls, data: Any) -> Any:
        """Place flat names (``queue_timeout``) into their sections by field name (``_FLAT``, read
        off the sections' aliases). Hand-written: pydantic's aliases run the other way
        (``AliasPath`` reads one field from a nested input, not a nested field from a flat one)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for flat, (section, name) in _FLAT.items():
            if flat in data:
                value, current = data.pop(flat), data.get(section)
                data[section] = {**(current if isinstance(current, dict) else {}), name: value}
        policy = data.get("policy")
        if isinstance(policy, dict) and "kind" not in policy:
            data["policy"] = {"kind": "prefix", **policy}
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init values), ``PROXY_*`` variables, the config file, each by flat name (the
        library's ``env_settings`` reads a section as JSON, ``PROXY_HEALTH``: left out)."""
        env = _FlatEnvSource()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env]
        config = init_settings().get("config") or env().get("config")
        if config:
            sources.append(InitSettingsSource(settings_cls, read_config_file(Path(config))))
        return tuple(sources)


def _flat_names() -> dict[str, tuple[str, str]]:
    """Flat name -> (section, field): each section field's alias, then the policy's fields
    (``proxy.routing.settings``) under their own names, its ``kind`` as ``policy``."""
    names = {
        field.alias: (section, name)
        for section, info in Settings.model_fields.items()
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
        for name, field in info.annotation.model_fields.items()
        if field.alias
    }
    policy = {name: ("policy", name) for name in PrefixSettings.model_fields if name != "kind"}
    return names | {"policy": ("policy", "kind")} | policy


_FLAT = _flat_names()
_SECTIONS = {section for section, _ in _FLAT.values()}
_FLAT_BY_PLACE = {place: flat for flat, place in _FLAT.items()}


def env_name(field: str) -> str:
    return "PROXY_" + field.upper()


def flat_fields() -> list[str]:
    """Every flat setting name a user can give, in declaration order."""
    return [name for name in Settings.model_fields if name not in _SECTIONS] + list(_FLAT)


def flat_name(loc: tuple[int | str, ...]) -> str:
    """The flat name a validation error's ``loc`` points at (a section's own check: the section)."""
    at = tuple(str(part) for part in loc)
    flat = _FLAT_BY_PLACE.get((at[0], at[1]), at[-1]) if len(at) >= 2 else (at[0] if at else "?")
    return ".".join(at) if flat in _SECTIONS else flat


# What the environment is read against: every flat name, upper-case, typed ``str``.
_ENV_FIELDS: dict[str, Any] = {name.upper(): (str | None, None) for name in flat_fields()}
_FLAT_ENV = create_model("FlatNames", __base__=BaseSettings, **_ENV_FIELDS)


class _FlatEnvSource(EnvSettingsSource):
    """``PROXY_<FLAT NAME>`` variables, found by the library's env source on ``_FLAT_ENV``:
    matched case-sensitively, as ``os.environ`` is on Linux (its default would take ``proxy_port``
    too), values left strings for ``Settings`` to validate, as a flag's are, keys made flat."""

    def __init__(self) -> None:
        super().__init__(_FLAT_ENV, env_prefix="PROXY_", case_sensitive=True)

    def __call__(self) -> dict[str, Any]:
        return {name.lower(): value for name, value in super().__call__().items()}


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]*@")


def hide_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` part of any URL in it replaced by ``***@``."""
    return _URL_CREDENTIALS.sub("***@", text)


def check_replica_url(url: str) -> str:
    """Raise ValueError unless ``url`` is an absolute http(s) URL with a host, a valid port, and
    no credentials, query or fragment. Messages never show credentials."""
    shown = hide_credentials(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"replica URL {shown!r} must look like http://HOST:PORT or https://HOST")
    if "@" in parts.netloc:
        raise ValueError(
            f"replica URL {shown!r} must not carry credentials (user:password@): "
            "give the token with --upstream-token (PROXY_UPSTREAM_TOKEN) instead"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"replica URL {shown!r} must not carry a query or fragment")
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when asked)
    except ValueError as exc:
        raise ValueError(f"replica URL {shown!r} has a bad port: {exc}") from None
    if any(ord(c) < 33 or ord(c) > 126 for c in url):
        raise ValueError(f"replica URL {shown!r} must be printable ASCII without spaces")
    return url


def read_config_file(path: Path) -> dict[str, Any]:
    """Load a TOML or JSON config file of flat setting names. Raises ValueError with the reason.

    Read here, not by the library's ``TomlConfigSettingsSource``/``JsonConfigSettingsSource``:
    they skip a missing file, take an empty JSON file for no settings and raise the parser's error
    without the file's name. The values go on through the library's ``InitSettingsSource``."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"config file {path} is not valid TOML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a table of settings")
    unknown = sorted(set(data) - set(flat_fields()))
    if unknown:
        raise ValueError(f"config file {path}: unknown setting(s) {', '.join(unknown)}")
    return data
