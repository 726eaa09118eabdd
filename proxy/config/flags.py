"""``rollout-proxy``'s flags, made from the settings' fields: one per flat name, its help the
field's ``description``, its metavar and default read off the field's type, unit and value.

Written once, next to the setting, so ``--help``, the README's claims and the code cannot drift:
a boolean is a ``--x/--no-x`` pair because its field is ``bool``; a ``Seconds`` field shows
``SECONDS`` and ``60 s``; a None default shows the field's ``unset`` words, else ``none``. A
setting's earlier names (``settings.ALIASES``) are more option strings of its flag, after its own,
named in its help; one that means something else in another program (``settings.DEPRECATED``:
``--replicas``, a count in ``rollout-deploy``) is left out of the help and warned when given
(``deprecated.DeprecatedNames``). A flag is never taken by a prefix of its name, and an unknown
one is answered with the closest setting's flag (``programs.OneLineParser``).
"""

from __future__ import annotations

import argparse
import math
import types
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from proxy.config.deprecated import CanonicalFormatter, DeprecatedNames
from proxy.config.programs import OneLineParser, did_you_mean, version_flag
from proxy.config.settings import DEPRECATED, aliases_of, env_name, field_of, flat_fields
from proxy.config.units import BYTES_FORMS, QUICK, SECONDS_FORMS, Unit

EPILOG = (
    f"SECONDS: {SECONDS_FORMS}; a probe's, an interval's or a connect time's bare number at most "
    f"{QUICK.high:g} (500 meant as 500ms is refused, not read as 8 minutes). BYTES: {BYTES_FORMS}. "
    "An unknown PROXY_* variable or config-file key stops start-up (exit 2), naming the closest "
    "setting. 'rollout-proxy top [URL]' shows a running proxy live (rollout-proxy top --help)."
)


def _parts(annotation: Any) -> tuple[list[Any], list[Any]]:
    """The types in ``annotation`` (unions opened, None dropped) and its ``Annotated`` metadata."""
    found: list[Any] = []
    meta: list[Any] = []

    def walk(node: Any) -> None:
        origin = get_origin(node)
        if origin is Annotated:
            meta.extend(get_args(node)[1:])
            walk(get_args(node)[0])
        elif origin in (Union, types.UnionType):
            for arg in get_args(node):
                walk(arg)
        elif node is not type(None):
            found.append(node)

    walk(annotation)
    return found, meta


def _extra(info: FieldInfo, key: str) -> Any:
    extra = info.json_schema_extra
    return extra.get(key) if isinstance(extra, dict) else None


def _unit(info: FieldInfo) -> Unit | None:
    _, meta = _parts(info.annotation)
    return next((m for m in [*info.metadata, *meta] if isinstance(m, Unit)), None)


def _choices(kind: Any) -> list[str] | None:
    if get_origin(kind) is Literal:
        return [str(arg) for arg in get_args(kind)]
    if isinstance(kind, type) and issubclass(kind, BaseModel) and "kind" in kind.model_fields:
        return [str(kind.model_fields["kind"].default)]
    return None


def metavar(info: FieldInfo) -> str:
    """What a value looks like: the field's own word, its unit's, or its type's."""
    unit, (kinds, _) = _unit(info), _parts(info.annotation)
    choices = [choice for kind in kinds for choice in _choices(kind) or []]
    if _extra(info, "metavar"):
        return str(_extra(info, "metavar"))
    if unit is not None:
        return unit.metavar
    if choices:
        return "{" + ",".join(choices) + "}"
    words = {int: "N", float: "NUMBER", Path: "PATH", SecretStr: "KEY", str: "TEXT"}
    return next((words[kind] for kind in kinds if kind in words), "VALUE")


def default(info: FieldInfo) -> str:
    """The default as a user would write it, or what an unset value means."""
    value = info.get_default(call_default_factory=True)
    if value is PydanticUndefined or value is None or value == []:
        return str(_extra(info, "unset") or "none")
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, BaseModel):
        return str(getattr(value, "kind", value))
    unit = _unit(info)
    return unit.show(value) if unit is not None else str(value)


def help_line(flat: str) -> str:
    info, unit = field_of(flat), _unit(field_of(flat))
    kept = [old for old in aliases_of(flat) if old not in DEPRECATED]
    earlier = "".join(f"; earlier name: {old}" for old in kept)
    if unit is not None and unit.bare.high < math.inf:
        earlier += f"; a bare number: at most {unit.bare.high:g} s"
    text = f"{info.description or ''}{earlier} (default: {default(info)}) [env {env_name(flat)}]"
    return text.replace("%", "%%").strip()


class _Parser(OneLineParser):
    """A bad flag is one line, not the usage of some seventy flags above it."""

    def error(self, message: str) -> NoReturn:
        explained = did_you_mean(message, [self])
        self.exit(2, f"{self.prog}: {explained} (rollout-proxy --help lists the flags)\n")


def build_parser() -> argparse.ArgumentParser:
    """Every setting as a flag, each absent one ``None`` (so only the given ones are passed on)."""
    parser = _Parser(
        prog="rollout-proxy",
        usage="rollout-proxy [FLAG ...] | rollout-proxy top [URL]",
        description="Routing proxy in front of N vLLM replicas. Every flag is also an environment "
        "variable (PROXY_<NAME>) and a config-file setting. Also: rollout-proxy top [URL], a live "
        "view of a running proxy.",
        epilog=EPILOG,
        formatter_class=CanonicalFormatter,
    )
    version_flag(parser)
    for name in flat_fields():
        flags, info = [_flag(flat) for flat in [name, *aliases_of(name)]], field_of(name)
        if info.annotation is bool:
            parser.add_argument(
                *flags, action=argparse.BooleanOptionalAction, default=None, help=help_line(name)
            )
        else:
            parser.add_argument(
                *flags,
                action=DeprecatedNames,
                deprecated={
                    _flag(old): why for old, why in DEPRECATED.items() if _flag(old) in flags
                },
                dest=name,
                default=None,
                metavar=metavar(info),
                help=help_line(name),
            )
    return parser


def _flag(flat: str) -> str:
    return "--" + flat.replace("_", "-")
