"""Settings: one object, built once at the edge from flags, environment and a config file.

Precedence, highest first: command-line flags, ``PROXY_*`` environment variables, the file named by
``--config``/``PROXY_CONFIG`` (TOML or JSON), the defaults below. Every field is validated at start;
a bad value stops start-up with a message naming the field, the value and what is allowed.
Secrets are ``SecretStr``: their values never reach a repr, a log line or an error message.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from proxy.adapters.settings import AdapterSettings
from proxy.fleet.discover_spec import DnsName, JobsLabel, parse_discover_spec
from proxy.fleet.load_settings import LoadSettings
from proxy.routing.peek import DEFAULT_MAX_ELEMENTS
from proxy.routing.settings import PolicySettings, PrefixSettings

PositiveFloat = Annotated[float, Field(gt=0)]


class HealthSettings(BaseModel):
    """Active health probing of each replica's ``/health``."""

    model_config = ConfigDict(frozen=True)

    interval_s: PositiveFloat = 1.0
    timeout_s: PositiveFloat = 2.0
    eject_after: Annotated[int, Field(ge=1)] = 3
    readmit_after: Annotated[int, Field(ge=1)] = 2
    info_refresh_s: PositiveFloat = 30.0


class LimitSettings(BaseModel):
    """In-flight caps and the bounded FIFO wait queue."""

    model_config = ConfigDict(frozen=True)

    max_inflight_per_replica: Annotated[int, Field(ge=1)] = 128
    max_inflight: Annotated[int, Field(ge=1)] | None = None
    queue_size: Annotated[int, Field(ge=0)] = 4096
    queue_timeout_s: PositiveFloat = 60.0


class UpstreamSettings(BaseModel):
    """How the proxy talks to replicas."""

    model_config = ConfigDict(frozen=True)

    token: SecretStr | None = None
    connect_timeout_s: PositiveFloat = 5.0
    request_timeout_s: PositiveFloat = 900.0
    ca_bundle: Path | None = None
    tls_verify: bool = True
    max_attempts: Annotated[int, Field(ge=1, le=16)] = 3
    breaker_failures: Annotated[int, Field(ge=1)] = 5
    breaker_cooldown_s: PositiveFloat = 10.0
    max_answer_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024 * 1024


class ClientSettings(BaseModel):
    """What one client (or many) may cost the proxy: connections, time, memory, CPU."""

    model_config = ConfigDict(frozen=True)

    max_connections: Annotated[int, Field(ge=1)] = 4096
    keepalive_timeout_s: PositiveFloat = 75.0
    head_timeout_s: PositiveFloat = 10.0
    body_timeout_s: PositiveFloat = 60.0
    send_timeout_s: PositiveFloat = 60.0
    max_body_bytes: Annotated[int, Field(ge=1024)] = 32 * 1024 * 1024
    max_body_bytes_in_flight: Annotated[int, Field(ge=1024)] = 1024 * 1024 * 1024
    max_prompt_elements: Annotated[int, Field(ge=16)] = DEFAULT_MAX_ELEMENTS

    @model_validator(mode="after")
    def _budget_holds_a_body(self) -> ClientSettings:
        if self.max_body_bytes_in_flight < self.max_body_bytes:
            raise ValueError(
                "--max-body-bytes-in-flight must be at least --max-body-bytes "
                f"({self.max_body_bytes})"
            )
        return self


# Flat field name -> (section, field in section). Flags and env vars are flat, as users type them.
_SECTIONS: dict[str, tuple[str, str]] = {
    "health_interval": ("health", "interval_s"),
    "health_timeout": ("health", "timeout_s"),
    "eject_after": ("health", "eject_after"),
    "readmit_after": ("health", "readmit_after"),
    "info_refresh": ("health", "info_refresh_s"),
    "max_inflight_per_replica": ("limits", "max_inflight_per_replica"),
    "max_inflight": ("limits", "max_inflight"),
    "queue_size": ("limits", "queue_size"),
    "queue_timeout": ("limits", "queue_timeout_s"),
    "upstream_token": ("upstream", "token"),
    "connect_timeout": ("upstream", "connect_timeout_s"),
    "request_timeout": ("upstream", "request_timeout_s"),
    "ca_bundle": ("upstream", "ca_bundle"),
    "tls_verify": ("upstream", "tls_verify"),
    "max_attempts": ("upstream", "max_attempts"),
    "breaker_failures": ("upstream", "breaker_failures"),
    "breaker_cooldown": ("upstream", "breaker_cooldown_s"),
    "max_answer_bytes": ("upstream", "max_answer_bytes"),
    "max_client_connections": ("client", "max_connections"),
    "client_keepalive_timeout": ("client", "keepalive_timeout_s"),
    "client_head_timeout": ("client", "head_timeout_s"),
    "client_body_timeout": ("client", "body_timeout_s"),
    "client_send_timeout": ("client", "send_timeout_s"),
    "max_body_bytes": ("client", "max_body_bytes"),
    "max_body_bytes_in_flight": ("client", "max_body_bytes_in_flight"),
    "max_prompt_elements": ("client", "max_prompt_elements"),
    "adapters_dir": ("adapters", "dir"),
    "adapters_bucket": ("adapters", "bucket"),
    "adapters_mount": ("adapters", "mount_path"),
    "watch_interval": ("adapters", "watch_interval_s"),
    "adapter_window": ("adapters", "window"),
    "adapter_load_deadline": ("adapters", "load_deadline_s"),
    "load_interval": ("load", "interval_s"),
    "load_timeout": ("load", "timeout_s"),
    "load_stale": ("load", "stale_s"),
    "kv_high": ("load", "kv_high"),
    "waiting_high": ("load", "waiting_high"),
    "adapter_push": ("adapters", "push"),
    "adapter_push_buffer": ("adapters", "push_buffer_bytes"),
    "adapter_push_rate": ("adapters", "push_rate"),
    "adapter_push_stall": ("adapters", "push_stall_s"),
    "adapter_store": ("adapters", "store"),
    "adapter_store_max_adapter_bytes": ("adapters", "store_max_adapter_bytes"),
    "adapter_store_max_bytes": ("adapters", "store_max_bytes"),
    "policy": ("policy", "kind"),
    "load_factor": ("policy", "load_factor"),
    "load_slack": ("policy", "load_slack"),
    "vnodes": ("policy", "vnodes"),
    "sticky_size": ("policy", "sticky_size"),
    "block_tokens": ("policy", "block_tokens"),
    "chunk_bytes": ("policy", "chunk_bytes"),
    "template_threshold": ("policy", "template_threshold"),
    "max_tracked": ("policy", "max_tracked"),
}
_NESTED = ("health", "limits", "upstream", "client", "policy", "adapters", "load")


class Settings(BaseSettings):
    """Everything the proxy is configured with. Components receive their own section."""

    model_config = SettingsConfigDict(
        env_prefix="PROXY_", extra="forbid", frozen=True, validate_default=True
    )

    replicas: Annotated[list[str], NoDecode] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    api_key: SecretStr | None = None
    admin_key: SecretStr | None = None
    shutdown_timeout: Annotated[float, Field(ge=0)] = 30.0
    supervise: bool = False
    access_log: bool = False
    otel_spans: bool = False
    advice_window: PositiveFloat = 60.0
    policy: PolicySettings = PrefixSettings()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    config: Path | None = None
    discover: str | None = None
    discover_interval: PositiveFloat = 5.0
    discover_namespace: str | None = None
    # Hosts the admin API may add as replicas (fnmatch patterns); empty: derived
    # (proxy.fleet.hosts: the configured replicas' domains, *.hf.jobs when discovering, loopback
    # only when the proxy listens there).
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
        """Accept flat names (``queue_timeout``) and place them into their sections."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for flat, (section, name) in _SECTIONS.items():
            if flat in data:
                value = data.pop(flat)
                current = data.get(section)
                merged = dict(current) if isinstance(current, dict) else {}
                merged[name] = value
                data[section] = merged
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
        sources: list[PydanticBaseSettingsSource] = [init_settings, _FlatEnvSource(settings_cls)]
        config_path = _config_path(init_settings)
        if config_path is not None:
            sources.append(_FileSource(settings_cls, read_config_file(config_path)))
        return tuple(sources)


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


def env_name(field: str) -> str:
    return "PROXY_" + field.upper()


def flat_fields() -> list[str]:
    """Every flat setting name a user can give, in declaration order."""
    names = [name for name in Settings.model_fields if name not in _NESTED]
    return names + list(_SECTIONS)


def _config_path(init_settings: PydanticBaseSettingsSource) -> Path | None:
    given = getattr(init_settings, "init_kwargs", {}).get("config") or os.environ.get(
        env_name("config")
    )
    return Path(given) if given else None


class _FlatEnvSource(PydanticBaseSettingsSource):
    """Reads ``PROXY_<FLAT_NAME>`` variables; values stay strings for pydantic to validate."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        name = env_name(field_name)
        return os.environ.get(name), name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name in flat_fields():
            value, _, _ = self.get_field_value(None, name)
            if value is not None:
                found[name] = value
        return found


class _FileSource(PydanticBaseSettingsSource):
    """Values read from the config file (lowest precedence after the defaults)."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def read_config_file(path: Path) -> dict[str, Any]:
    """Load a TOML or JSON config file of flat setting names. Raises ValueError with the reason."""
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


_SECRET_FIELDS = {"api_key", "admin_key", "upstream_token", "token"}


def describe_error(error: ValidationError) -> str:
    """One line per bad field: the flag, the env var, the value (masked if secret), the rule."""
    reverse = {section_field: flat for flat, section_field in _SECTIONS.items()}
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(str(part) for part in item["loc"])
        flat = reverse.get((loc[0], loc[1]), loc[-1]) if len(loc) >= 2 else (loc[0] if loc else "?")
        if flat in _NESTED:
            flat = ".".join(loc)
        given = item.get("input")
        if flat == "policy" and isinstance(given, dict):
            given = given.get("kind")
        shown = "***" if flat in _SECRET_FIELDS else hide_credentials(repr(given))
        message = hide_credentials(item["msg"])
        if loc[0] == "policy" and item["type"] == "extra_forbidden":
            message = "this setting applies only to --policy prefix"
        flag = "--" + flat.replace("_", "-")
        lines.append(f"invalid setting {flag} ({env_name(flat)}): got {shown}: {message}")
    return "\n".join(lines)
