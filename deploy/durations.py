"""Job lifetimes as the Jobs API takes them. The duration flags themselves (``90s``, ``30m``,
``1.5h``, ``2d``, a plain number of seconds) are read by ``proxy.config.units``, the one parser
of every program's durations, ``rollout-proxy``'s settings included; this module only writes a
lifetime in the Jobs API's own form (its ``30m`` is not a display: ``--help`` shows ``30 min``).

Lifetimes go to the Jobs API as whole seconds written with their unit (``format_duration``):
huggingface_hub reads a string ending in ``s``, ``m``, ``h`` or ``d`` as that unit
(``_create_job_spec``) and anything else through ``int()``, so ``"6H"`` would raise deep in the
client, after the bucket was made and the wheel uploaded; ``6H`` is read, then written ``6h``.
"""

from __future__ import annotations

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def whole_seconds(seconds: float) -> int:
    """A job lifetime as the Jobs API counts it: whole seconds (truncated, as the client does),
    at least one."""
    return max(int(seconds), 1)


def format_duration(seconds: int) -> str:
    """``seconds`` in the largest unit that divides it: 21600 -> ``6h``, 23400 -> ``390m``."""
    for unit, size in UNITS.items():
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    raise AssertionError("a second divides every whole number of seconds")
