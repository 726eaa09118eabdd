"""Where settings come from besides flags: ``PROXY_*`` variables and the config file.

Both are read by flat name (or a setting's earlier name, renamed as read: ``rename_aliases``) and
checked the same way: a name that is no setting stops start-up
(exit 2) with the closest setting's name. An error, not a warning: a misspelled ``PROXY_POLCY``
ignored would leave the default running where the user asked for something else, as a
misspelled key in the file would. Kubernetes' service links (``service_links``: ``PROXY_PORT=
tcp://...`` and the like, from a Service named ``proxy``) are no settings and no typos: left out
of both. The values stay as written (strings, TOML's types) for ``Settings`` to validate, as a
flag's are.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import create_model
from pydantic_settings import BaseSettings, EnvSettingsSource

from proxy.config.deprecated import deprecation
from proxy.config.service_links import is_service_link
from proxy.config.spelling import closest

PREFIX = "PROXY_"


def _unknown(kind: str, given: str, known: Iterable[str]) -> str:
    close = closest(given, known)
    hint = f"did you mean {close}?" if close else "rollout-proxy --help lists the settings"
    return f"unknown {kind} {given}: {hint}"


def unknown_variables(names: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """Each ``PROXY_*`` variable of ``environ`` that names no setting, with its line (the
    closest setting's name); Kubernetes' service links are not among them."""
    known = [PREFIX + name.upper() for name in names]
    return {
        variable: _unknown("environment variable", variable, known)
        for variable in sorted(environ)
        if variable.startswith(PREFIX)
        and variable not in known
        and not is_service_link(variable, environ[variable])
    }


def check_environment(names: Iterable[str], environ: Mapping[str, str] | None = None) -> None:
    """ValueError, one line per ``PROXY_*`` variable that names no setting."""
    lines = unknown_variables(names, os.environ if environ is None else environ).values()
    if lines:
        raise ValueError("\n".join(lines))


def rename_aliases(
    values: Mapping[str, Any], aliases: Mapping[str, str], shown: Callable[[str], str]
) -> dict[str, Any]:
    """``values`` with each earlier name (``aliases``: old -> new) renamed; ValueError when one
    source gives a setting under both names (``shown``: how the source spells a name)."""
    renamed = dict(values)
    for old, new in aliases.items():
        if old in renamed:
            if new in renamed:
                raise ValueError(
                    f"{shown(old)} and {shown(new)} are one setting ({shown(old)} is its earlier "
                    f"name): give {shown(new)} only"
                )
            renamed[new] = renamed.pop(old)
    return renamed


class FlatEnvSource(EnvSettingsSource):
    """``PROXY_<FLAT NAME>`` variables, found by the library's env source on a model of every flat
    name typed ``str``: matched case-sensitively, as ``os.environ`` is on Linux (its default would
    take ``proxy_port`` too), values left strings, keys made flat, earlier names (``aliases``)
    renamed. Unknown names are refused."""

    def __init__(self, names: Iterable[str], aliases: Mapping[str, str] | None = None) -> None:
        self.aliases = dict(aliases or {})
        self.names = [*names, *self.aliases]
        model = _flat_model(tuple(name.upper() for name in self.names))
        super().__init__(model, env_prefix=PREFIX, case_sensitive=True)

    def as_written(self) -> dict[str, Any]:
        """The variables by the flat name they were given under (earlier names not renamed),
        less Kubernetes' service links (``PROXY_PORT=tcp://...``)."""
        check_environment(self.names)
        return {
            name.lower(): value
            for name, value in super().__call__().items()
            if not (isinstance(value, str) and is_service_link(PREFIX + name, value))
        }

    def __call__(self) -> dict[str, Any]:
        return rename_aliases(self.as_written(), self.aliases, lambda name: PREFIX + name.upper())


_MODELS: dict[tuple[str, ...], type[BaseSettings]] = {}


def _flat_model(fields: tuple[str, ...]) -> type[BaseSettings]:
    """The model the library's env source reads against (made once per set of names)."""
    if fields not in _MODELS:
        spec: dict[str, Any] = {name: (str | None, None) for name in fields}
        _MODELS[fields] = create_model("FlatNames", __base__=BaseSettings, **spec)
    return _MODELS[fields]


def read_config_file(
    path: Path,
    names: Iterable[str],
    aliases: Mapping[str, str] | None = None,
    *,
    rename: bool = True,
) -> dict[str, Any]:
    """Load a TOML or JSON config file of flat setting names (or earlier ones, ``aliases``: renamed
    unless ``rename`` is false). Raises ValueError with the reason.

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
    aliases = aliases or {}
    known = [*names, *aliases]
    unknown = [_unknown("setting", key, known) for key in sorted(set(data) - set(known))]
    if unknown:
        raise ValueError(f"config file {path}: " + f"\nconfig file {path}: ".join(unknown))
    if not rename:
        return data
    try:
        return rename_aliases(data, aliases, str)
    except ValueError as exc:
        raise ValueError(f"config file {path}: {exc}") from None


def deprecated_uses(
    environ: Mapping[str, str],
    config: Path | None,
    names: Iterable[str],
    aliases: Mapping[str, str],
    deprecated: Mapping[str, str],
) -> list[str]:
    """A line for each ``deprecated`` earlier name (-> what it means elsewhere) that a variable of
    ``environ`` or a key of the settings file ``config`` (read again, unrenamed) gives."""
    keys = read_config_file(config, names, aliases, rename=False) if config else {}
    lines = []
    for old, why in deprecated.items():
        new, variable = aliases[old], PREFIX + old.upper()
        if variable in environ:
            lines.append(deprecation("rollout-proxy", variable, PREFIX + new.upper(), why))
        if old in keys:
            lines.append(deprecation("rollout-proxy", f"{old} in {config}", new, why))
    return lines
