"""Job lifetimes as the Jobs API reads them, with the unit always written out.

huggingface_hub turns ``timeout`` into ``timeoutSeconds`` with one rule (``_create_job_spec``): a
string ending in ``s``, ``m``, ``h`` or ``d`` is a number of that unit (``"1.5h"`` is 5400 s,
truncated to whole seconds); anything else goes through ``int()``, so ``"90"`` is 90 SECONDS and
``"6H"`` raises a ``ValueError`` deep in the client, after the bucket was made and the wheel
uploaded. ``parse_duration`` applies the same rule but insists on a unit, so a typo or a
forgotten unit stops at the command line; ``format_duration`` writes seconds back in the largest
unit that divides them, which the client reads back to the same number.
"""

from __future__ import annotations

import math

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str, flag: str = "--timeout") -> int:
    """Whole seconds of ``text`` (``90m``, ``6h``, ``1.5h``); ValueError saying what is wrong."""
    unit = text[-1:]
    if unit not in UNITS:
        if _number(text) is not None:
            raise ValueError(
                f"argument {flag}: {text!r} alone would be {text} seconds to the Jobs API: "
                f"write {text}s, {text}m or {text}h"
            )
        raise ValueError(
            f"argument {flag}: a number and a unit s, m, h or d (e.g. 90m, 6h), not {text!r}"
        )
    number = _number(text[:-1])
    if number is None:
        raise ValueError(
            f"argument {flag}: a number and a unit s, m, h or d (e.g. 90m, 6h), not {text!r}"
        )
    seconds = int(number * UNITS[unit])
    if seconds <= 0:
        raise ValueError(f"argument {flag}: must be longer than 0 (got {text!r})")
    return seconds


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def format_duration(seconds: int) -> str:
    """``seconds`` in the largest unit that divides it: 21600 -> ``6h``, 23400 -> ``390m``."""
    for unit, size in UNITS.items():
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    raise AssertionError("a second divides every whole number of seconds")
