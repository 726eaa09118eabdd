"""``Settings``: every section, the top-level settings, and the flat names users give them.

Users name each setting flat (``--health-interval``, ``PROXY_HEALTH_INTERVAL``, ``health_interval``
in the file): a section field's alias, a policy field's own name (``_FLAT``, read off the
models). ``field_of`` finds the field behind a flat name, for ``--help`` and error messages.

``ALIASES``: earlier names of settings renamed for one vocabulary across the programs (a list of
replica URLs is ``replica_urls`` everywhere; a count of replicas is ``--replica-count``).
They keep working as flags, variables and file keys: each source renames them as it reads
(``sources.rename_aliases``), so a source's precedence holds whichever name it used (a library
alias would be resolved after the sources are merged: ``PROXY_REPLICAS`` would lose to a file's
``replica_urls``); giving both names in one source is refused. ``DEPRECATED``: those of them that
mean something else in another program, each with what it means there: warned at start
(``proxy.config.deprecated``), refused from its release on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from proxy.config.sections import (
    AdapterSettings,
    ClientSettings,
    HealthSettings,
    LimitSettings,
    LoadSettings,
    PositiveSeconds,
    QuickPositiveSeconds,
    UpstreamSettings,
)
from proxy.config.sources import FlatEnvSource, read_config_file, rename_aliases
from proxy.config.specs import DnsName, JobsLabel, check_replica_url, parse_discover_spec
from proxy.config.units import Seconds
from proxy.routing.settings import PolicySettings, PrefixSettings
from proxy.runs.table import parse_runs


class Settings(BaseSettings):
    """Everything the proxy is configured with. Components receive their own section."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, validate_default=True)

    replica_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated replica base URLs (http:// or https://)",
        json_schema_extra={"metavar": "URLS"},
    )
    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0 inside a job)")
    port: Annotated[int, Field(ge=0, le=65535)] = Field(
        8000,
        description="port to listen on (0: any free one)",
        json_schema_extra={"metavar": "N"},
    )
    api_key: SecretStr | None = Field(
        None, description="key clients must send as 'Authorization: Bearer KEY' (not /health)"
    )
    admin_key: SecretStr | None = Field(
        None, description="key for the /admin API", json_schema_extra={"unset": "none: no API"}
    )
    shutdown_timeout: Annotated[Seconds, Field(ge=0)] = Field(
        30.0, description="on SIGTERM, how long in-flight requests may take to finish"
    )
    supervise: bool = Field(
        False,
        description="run the proxy as a child; restart it on the same port if it dies",
    )
    # Send TRL's /pause and /resume to the replicas (freezing every running request for the
    # sync) instead of answering them from the proxy's state (proxy.dataplane.fanout).
    forward_pause: bool = Field(
        False,
        description="send TRL's /pause and /resume to every replica, freezing the fleet for each "
        "weight sync (off: the proxy answers them and the fleet keeps generating)",
    )
    access_log: bool = Field(
        False, description="log a line per request: X-Request-ID, method, path, status, replica"
    )
    otel_spans: bool = Field(
        False,
        description="OpenTelemetry spans to OTEL_EXPORTER_OTLP_ENDPOINT (needs the otel extra)",
    )
    advice_window: PositiveSeconds = Field(
        60.0, description="the stretch of the run the bottleneck advisor judges"
    )
    policy: PolicySettings = Field(PrefixSettings(), description="how a replica is chosen")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="least severe log records written"
    )
    config: Path | None = Field(
        None, description="TOML or JSON file of settings (flat names: the flags without dashes)"
    )
    discover: str | None = Field(
        None,
        description="also take replicas from hf-jobs:LABEL=VALUE (RUNNING jobs' exposed URLs) or "
        "dns:NAME:PORT (every address NAME resolves to)",
        json_schema_extra={"metavar": "SPEC"},
    )
    discover_interval: QuickPositiveSeconds = Field(5.0, description="time between discovery looks")
    discover_namespace: str | None = Field(
        None,
        description="HF Jobs namespace that hf-jobs: discovery lists",
        json_schema_extra={"unset": "the token's user", "metavar": "NAMESPACE"},
    )
    # Hosts the admin API may add as replicas (fnmatch patterns); empty: proxy.fleet.hosts's.
    replica_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="host patterns the admin API may add as replicas, comma-separated",
        json_schema_extra={
            "metavar": "PATTERNS",
            "unset": "the replicas' domains, *.hf.jobs when discovering, loopback if local",
        },
    )
    runs: str | None = Field(
        None,
        description="RL runs sharing this fleet, each at /runs/NAME (weight 1 if omitted)",
        json_schema_extra={"metavar": "NAME[=WEIGHT],...", "unset": "none: one run, bare URL"},
    )
    hub_endpoint: str | None = Field(
        None,
        description="Hub API endpoint",
        json_schema_extra={"unset": "huggingface_hub's (HF_ENDPOINT)", "metavar": "URL"},
    )
    health: HealthSettings = HealthSettings()
    limits: LimitSettings = LimitSettings()
    upstream: UpstreamSettings = UpstreamSettings()
    client: ClientSettings = ClientSettings()
    adapters: AdapterSettings = AdapterSettings()
    load: LoadSettings = LoadSettings()

    @field_validator("replica_urls", "replica_hosts", mode="before")
    @classmethod
    def _split_replicas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("replica_urls")
    @classmethod
    def _check_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            check_replica_url(url)
        return [url.rstrip("/") for url in urls]

    @field_validator("runs")
    @classmethod
    def _check_runs(cls, spec: str | None) -> str | None:
        if spec is not None:
            parse_runs(spec)
        return spec

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
        env = FlatEnvSource(flat_fields(), ALIASES)
        given = rename_aliases(init_settings(), ALIASES, str)  # flags, or values given in code
        sources: list[PydanticBaseSettingsSource] = [InitSettingsSource(settings_cls, given), env]
        config = given.get("config") or env().get("config")
        if config:
            values = read_config_file(Path(config), flat_fields(), ALIASES)
            sources.append(InitSettingsSource(settings_cls, values))
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
# Earlier name -> the setting's name (see the module docstring).
ALIASES = {
    "replicas": "replica_urls",
    "adapter_store_max_adapter_bytes": "adapter_max_bytes",
}
# Earlier names that mean something else elsewhere -> what (see the module docstring).
DEPRECATED = {"replicas": "--replicas is a count of replica jobs in rollout-deploy"}
_SECTIONS = {section for section, _ in _FLAT.values()}
_FLAT_BY_PLACE = {place: flat for flat, place in _FLAT.items()}


def env_name(field: str) -> str:
    return "PROXY_" + field.upper()


def flat_fields() -> list[str]:
    """Every flat setting name a user can give, in declaration order."""
    return [name for name in Settings.model_fields if name not in _SECTIONS] + list(_FLAT)


def accepted_names() -> list[str]:
    """Every flat name a source takes: the settings' and their earlier names (``ALIASES``)."""
    return flat_fields() + list(ALIASES)


def aliases_of(flat: str) -> list[str]:
    """The earlier names of the setting ``flat``."""
    return [old for old, new in ALIASES.items() if new == flat]


def flat_name(loc: tuple[int | str, ...]) -> str:
    """The flat name a validation error's ``loc`` points at (a section's own check: the section)."""
    at = tuple(str(part) for part in loc)
    flat = _FLAT_BY_PLACE.get((at[0], at[1]), at[-1]) if len(at) >= 2 else (at[0] if at else "?")
    return ".".join(at) if flat in _SECTIONS else flat


def field_of(flat: str) -> FieldInfo:
    """The field a flat name sets: a top-level one, a section's, or the prefix policy's."""
    if flat == "policy" or flat not in _FLAT:
        return Settings.model_fields[flat]
    section, name = _FLAT[flat]
    if section == "policy":
        return PrefixSettings.model_fields[name]
    model = Settings.model_fields[section].annotation
    assert isinstance(model, type)
    assert issubclass(model, BaseModel)
    return model.model_fields[name]
