"""Settings: one object, built once at the edge from flags, environment and a config file.

Precedence, highest first: command-line flags, ``PROXY_*`` environment variables, the file named by
``--config``/``PROXY_CONFIG`` (TOML or JSON), the defaults. Every field is validated at start;
a bad value stops start-up with a message naming where it came from (the flag, the variable, or
the file's key), the value and what is allowed; so does a variable or key that is no setting.
Durations and sizes take units (``units``: the one parser of every program's). Secrets are
``SecretStr``: their values never reach a repr, a log line or an error message.

Modules: ``sections`` (what each component receives), ``settings`` (``Settings`` and its flat
names), ``units``, ``specs`` (discovery specs, bucket paths, replica URLs), ``sources`` (the
environment and the file), ``errors`` (messages), ``flags`` (``rollout-proxy``'s parser),
``programs`` (what every program's command line shares: help with defaults and variables,
``--version``, no abbreviations, "did you mean", the install hint), ``spelling`` (the closest
known name to a misspelt one), ``deprecated`` (earlier names that mean something else elsewhere:
warned for a release, then refused), ``service_links`` (Kubernetes' variables that look like
settings), ``paths`` (the directories named, checked before start). It may import only
``proxy.routing`` of the proxy (and its ``__version__``).
"""

from proxy.config.errors import as_flag, describe_error, origins
from proxy.config.flags import build_parser
from proxy.config.sections import (
    MIB,
    AdapterSettings,
    ClientSettings,
    HealthSettings,
    LimitSettings,
    LoadSettings,
    UpstreamSettings,
)
from proxy.config.settings import (
    ALIASES,
    Settings,
    accepted_names,
    env_name,
    field_of,
    flat_fields,
    flat_name,
)
from proxy.config.sources import check_environment, read_config_file, unknown_variables
from proxy.config.specs import (
    DnsName,
    JobsLabel,
    check_replica_url,
    hide_credentials,
    parse_discover_spec,
    split_bucket,
)
from proxy.config.units import Bytes, Seconds, parse_bytes, parse_seconds

__all__ = [
    "ALIASES",
    "MIB",
    "AdapterSettings",
    "Bytes",
    "ClientSettings",
    "DnsName",
    "HealthSettings",
    "JobsLabel",
    "LimitSettings",
    "LoadSettings",
    "Seconds",
    "Settings",
    "UpstreamSettings",
    "accepted_names",
    "as_flag",
    "build_parser",
    "check_environment",
    "check_replica_url",
    "describe_error",
    "env_name",
    "field_of",
    "flat_fields",
    "flat_name",
    "hide_credentials",
    "origins",
    "parse_bytes",
    "parse_discover_spec",
    "parse_seconds",
    "read_config_file",
    "split_bucket",
    "unknown_variables",
]
