"""Durations and byte sizes as users write them, the one parser of every program's: ``60``,
``60s``, ``60 s``, ``500ms``, ``2m``, ``2 min``, ``1.5h``, ``1d``; ``33554432``, ``32MiB``,
``32 MiB``, ``64kB``, ``1GB``. The same in the proxy's flags, variables and files and in the other
programs' flags (``rollout-deploy --ready-timeout 30m``, ``rollout-replica --gen-token-s 50ms``,
``rollout-trainer --save-minutes 1h``), and shown in ``--help`` in a form these parsers read back
(``show_seconds``: ``60 s``, ``15 min``, ``6 h``; ``show_bytes``: ``32 MiB``).

The proxy's fields use the ``Annotated`` types (``Seconds``, ``QuickSeconds``, ``Bytes``): a
``BeforeValidator`` turns the text into a number, then the field's own bounds judge it, so ``-1``
still reads "greater than 0". argparse flags use ``DurationArg`` and ``SizeArg`` (``type=``), which
know the unit a bare number is in: a flag whose name carries its unit (``--gen-token-s``,
``--save-minutes``, ``--cpu-kvcache-gib``) reads a bare number in that unit, every other one in
seconds or bytes.

A bare number is seconds. Where it is more likely another unit, it is refused, naming the range a
bare number may take and the forms accepted (``Bare``): ``QUICK`` settings (probes, intervals,
connect times) take at most 300 bare (``--health-interval 500`` meant 500 ms, not 8 minutes);
``LIFETIME`` ones (a job's lifetime) at least 60 (``--timeout 6`` meant 6 hours). A number with
its unit is always taken as written, within the setting's own bounds.

Byte sizes are parsed by pydantic's ``ByteSize`` (kB, MB, GB: powers of 1000; KiB, MiB, GiB: of
1024; any case), once the text has a size's shape (ByteSize alone takes ``1 GB!`` for 1 GB); its
"could not parse value and unit" is replaced by the forms accepted. This module imports pydantic
and the standard library only: every program's parser imports it.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, ByteSize, TypeAdapter, ValidationError

_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h|d)\s*", re.IGNORECASE)
_BYTE_SIZE = TypeAdapter(ByteSize)
_BYTES_SHAPE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*[a-z]*\s*", re.IGNORECASE)
DURATION_UNITS = "500ms, 60s, 60 s, 2m, 1h, 1d"
SECONDS_FORMS = f"a number of seconds, or one with a unit: {DURATION_UNITS}"
BYTES_FORMS = (
    "a number of bytes, or one with a unit: 64kB, 1MB, 1GB (powers of 1000), "
    "32KiB, 32MiB, 32 MiB, 1GiB (powers of 1024)"
)


@dataclass(frozen=True)
class Bare:
    """The bare numbers (no unit) a duration takes as seconds: from ``low`` to ``high``. Outside,
    a number more likely meant another unit, so it must carry one. 0 and negative numbers are
    left to the setting's own bounds."""

    low: float = 0.0
    high: float = math.inf

    def check(self, number: float) -> None:
        if number > self.high:
            within, meant = f"at most {self.high:g}", f"{number:g}ms"
        elif 0 < number < self.low:
            within, meant = f"at least {self.low:g}", f"{number:g}m or {number:g}h"
        else:
            return
        raise ValueError(
            f"a bare number is seconds, and this setting takes {within} of them bare: write "
            f"{meant}, or {number:g}s if seconds are meant"
        )

    def parse(self, value: Any) -> Any:
        """``parse_seconds`` under this rule (a pydantic ``BeforeValidator``)."""
        return parse_seconds(value, self)


ANY = Bare()
QUICK = Bare(high=300.0)  # probes, intervals, connect times: 500 bare is 500 ms misread
LIFETIME = Bare(low=60.0)  # a job's lifetime: 6 bare is 6 hours misread


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


def parse_seconds(value: Any, bare: Bare = ANY) -> Any:
    """Seconds of ``value`` (a number, or text with a unit); ValueError saying the forms."""
    number = _number(value)
    if number is not None:
        bare.check(number)
        return number
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not a duration: give {SECONDS_FORMS}")
    return float(match[1]) * _SECONDS[match[2].lower()]


def parse_bytes(value: Any) -> Any:
    """Bytes of ``value`` (a number, or text with a unit); ValueError saying the forms."""
    number = _number(value)
    if number is not None:
        return number
    try:  # the shape first: ByteSize reads "1 GB!" as 1 GB, its junk ignored
        if not (isinstance(value, str) and _BYTES_SHAPE.fullmatch(value)):
            raise ValueError(value)
        return int(_BYTE_SIZE.validate_python(value))
    except (ValueError, ValidationError):
        raise ValueError(f"not a byte size: give {BYTES_FORMS}") from None


def show_seconds(value: float) -> str:
    """``60`` -> ``60 s``, ``900`` -> ``15 min``, ``21600`` -> ``6 h``, ``0.5`` -> ``0.5 s``:
    whole days or hours in those, whole minutes from 2 on in minutes, else seconds."""
    for size, name in ((86400, "d"), (3600, "h")):
        if value and value % size == 0:
            return f"{value / size:g} {name}"
    if value >= 120 and value % 60 == 0:
        return f"{value / 60:g} min"
    return f"{value:g} s"


def show_bytes(value: int) -> str:
    """``33554432`` -> ``32 MiB``: the largest binary unit that divides it, else bytes."""
    for power, name in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if value and value % (1 << (10 * power)) == 0:
            return f"{value >> (10 * power)} {name}"
    return f"{value} bytes"


@dataclass(frozen=True)
class Unit:
    """What ``--help`` shows for a setting of this unit: its metavar, how a value reads and the
    bare numbers it takes (``bare``)."""

    metavar: str
    bare: Bare = ANY

    def show(self, value: float) -> str:
        return show_bytes(int(value)) if self.metavar == "BYTES" else show_seconds(value)


SECONDS = Unit("SECONDS")
BYTES = Unit("BYTES")
Seconds = Annotated[float, BeforeValidator(parse_seconds), SECONDS]
QuickSeconds = Annotated[float, BeforeValidator(QUICK.parse), Unit("SECONDS", QUICK)]
Bytes = Annotated[int, BeforeValidator(parse_bytes), BYTES]


@dataclass(frozen=True)
class DurationArg:
    """An argparse ``type`` for a duration flag: its text in ``unit`` (``s``, or ``min`` for a
    flag named ``-minutes``), a bare number in that unit, judged by ``bare`` (in seconds);
    ``positive``: 0 refused too. Its message follows argparse's ``argument --FLAG:``."""

    unit: str = "s"
    bare: Bare = ANY
    positive: bool = False

    def __call__(self, text: str) -> float:
        number = _number(text)
        if number is None:
            try:
                seconds = float(parse_seconds(text))
            except ValueError:
                word = "minutes" if self.unit == "min" else "seconds"
                raise argparse.ArgumentTypeError(
                    f"a number of {word}, or one with a unit: {DURATION_UNITS}, not {text!r}"
                ) from None
        else:
            seconds = float(number * _SECONDS[self.unit])
            try:
                self.bare.check(seconds)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{exc} (got {text!r})") from None
        if not math.isfinite(seconds) or seconds < 0 or (self.positive and seconds == 0):
            above = "longer than 0" if self.positive else ">= 0"
            raise argparse.ArgumentTypeError(f"must be {above} (got {text!r})")
        return seconds / _SECONDS[self.unit]

    def show(self, value: float) -> str:
        return show_seconds(value * _SECONDS[self.unit])

    @property
    def metavar(self) -> str:
        return "MINUTES" if self.unit == "min" else "SECONDS"


@dataclass(frozen=True)
class SizeArg:
    """An argparse ``type`` for a size flag: its text in bytes (``per``: a flag named ``-gib``
    reads a bare number in GiB, ``per=1 << 30``), above 0 unless ``zero``."""

    per: int = 1
    zero: bool = False

    def __call__(self, text: str) -> float:
        number = _number(text)
        try:
            size = number * self.per if number is not None else parse_bytes(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (got {text!r})") from None
        if not math.isfinite(size) or size < 0 or (size == 0 and not self.zero):
            raise argparse.ArgumentTypeError(f"must be above 0 (got {text!r})")
        return int(size) if self.per == 1 else size / self.per

    def show(self, value: float) -> str:
        return show_bytes(round(value * self.per))

    @property
    def metavar(self) -> str:
        return "BYTES" if self.per == 1 else "GIB"
