"""Durations and byte sizes as users write them: ``60``, ``60s``, ``60 s``, ``500ms``, ``2m``;
``33554432``, ``32MiB``, ``32 MiB``, ``64kB``, ``1GB``. The same in flags, variables and files,
and in the other programs' duration flags (``rollout-deploy --ready-timeout 30m``).

Each is an ``Annotated`` type defined once (``Seconds``, ``Bytes``): a ``BeforeValidator`` turns
the text into a number, then the field's own bounds judge it, so ``-1`` still reads "greater than
0". Byte sizes are parsed by pydantic's ``ByteSize`` (kB, MB, GB: powers of 1000; KiB, MiB, GiB:
of 1024; any case); its "could not parse value and unit" is replaced by the forms accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, ByteSize, TypeAdapter, ValidationError

_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h|d)\s*", re.IGNORECASE)
_BYTE_SIZE = TypeAdapter(ByteSize)
SECONDS_FORMS = "a number of seconds, or one with a unit: 500ms, 60s, 60 s, 2m, 1h, 1d"
BYTES_FORMS = (
    "a number of bytes, or one with a unit: 64kB, 1MB, 1GB (powers of 1000), "
    "32KiB, 32MiB, 32 MiB, 1GiB (powers of 1024)"
)


def _number(value: Any) -> Any:
    """``value`` as a number if it reads as one (``"-1"`` too: the bounds refuse it), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value.strip())
            except ValueError:
                pass
    return None


def parse_seconds(value: Any) -> Any:
    number = _number(value)
    if number is not None:
        return number
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not a duration: give {SECONDS_FORMS}")
    return float(match[1]) * _SECONDS[match[2].lower()]


def parse_bytes(value: Any) -> Any:
    number = _number(value)
    if number is not None:
        return number
    try:
        return int(_BYTE_SIZE.validate_python(value))
    except ValidationError:
        raise ValueError(f"not a byte size: give {BYTES_FORMS}") from None


@dataclass(frozen=True)
class Unit:
    """What ``--help`` shows for a setting of this unit: its metavar and how a value reads."""

    metavar: str
    suffix: str

    def show(self, value: float) -> str:
        if self.metavar == "BYTES":
            return show_bytes(int(value))
        return f"{value:g}{self.suffix}"


SECONDS = Unit("SECONDS", " s")
BYTES = Unit("BYTES", " bytes")
Seconds = Annotated[float, BeforeValidator(parse_seconds), SECONDS]
Bytes = Annotated[int, BeforeValidator(parse_bytes), BYTES]


def show_bytes(value: int) -> str:
    """``33554432`` -> ``32 MiB``: the largest binary unit that divides it, else bytes."""
    for power, name in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if value and value % (1 << (10 * power)) == 0:
            return f"{value >> (10 * power)} {name}"
    return f"{value} bytes"
