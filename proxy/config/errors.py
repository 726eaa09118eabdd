"""A ``ValidationError`` in the user's words: one line per bad setting, naming where it came from.

A flag's value names the flag and its variable (``--kv-high (PROXY_KV_HIGH)``, also when the
source is no single setting: a section's own check), with its earlier names
(``--replica-urls/--replicas``); a variable's names the variable and a file's the key, each as
written (an earlier name too), and the file. Pydantic's wording for a union's tag and for an extra
input is replaced by what to do; secret values are never shown, nor a URL's credentials.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from proxy.config.settings import ALIASES, aliases_of, env_name, flat_fields, flat_name
from proxy.config.sources import FlatEnvSource, read_config_file
from proxy.config.specs import hide_credentials

_SECRET_FIELDS = {"api_key", "admin_key", "upstream_token", "token"}


def as_flag(flat: str) -> str:
    flags = "/".join(f"--{name.replace('_', '-')}" for name in [flat, *aliases_of(flat)])
    return f"{flags} ({env_name(flat)})"


def _spelled(flat: str, given: Mapping[str, Any]) -> str | None:
    """The name ``flat`` was given under in ``given`` (its own, or an earlier one), or None."""
    return next((name for name in [flat, *aliases_of(flat)] if name in given), None)


def origins(flags: Mapping[str, Any]) -> Callable[[str], str]:
    """Flat name -> where its value came from, by the sources' precedence (flags, variables,
    the file); read again here, after ``Settings`` has read them once without complaint."""
    try:
        env = FlatEnvSource(flat_fields(), ALIASES).as_written()
        config = flags.get("config") or env.get("config")
        file = (
            read_config_file(Path(config), flat_fields(), ALIASES, rename=False) if config else {}
        )
    except ValueError:  # pragma: no cover - Settings would have raised it first
        env, file = {}, {}

    def where(flat: str) -> str:
        in_env, in_file = _spelled(flat, env), _spelled(flat, file)
        if flat in flags or (in_env or in_file) is None:
            return as_flag(flat)
        return env_name(in_env) if in_env is not None else f"{in_file} in {config}"

    return where


def _plain(item: ErrorDetails) -> str:
    """Pydantic's message, or what it means where its wording speaks of its own machinery."""
    ctx = item.get("ctx") or {}
    if item["type"] == "union_tag_invalid":
        return "not one of " + str(ctx.get("expected_tags", "")).replace("'", "")
    if item["type"] == "extra_forbidden":
        if item["loc"][0] == "policy":
            return "this setting applies only to --policy prefix"
        return "no such setting here (rollout-proxy --help lists them)"
    message = item["msg"]
    return message.removeprefix("Value error, ")


def describe_error(error: ValidationError, where: Callable[[str], str] = as_flag) -> str:
    """One line per bad field: its source, the value (masked if secret), the rule."""
    lines = []
    for item in error.errors(include_url=False):
        flat = flat_name(item["loc"])
        given = item.get("input")
        if flat == "policy" and isinstance(given, dict):
            given = given.get("kind")
        shown = "***" if flat in _SECRET_FIELDS else hide_credentials(repr(given))
        message = hide_credentials(_plain(item))
        lines.append(f"invalid setting {where(flat)}: got {shown}: {message}")
    return "\n".join(lines)
