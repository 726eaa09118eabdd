"""Durations as users write them, on every duration flag of ``rollout-deploy``: ``90s``, ``30m``,
``1.5h``, ``2d``, or a plain number of seconds (``1800``); one rule, one parser.

``duration`` is the flags' argparse type (seconds, a float: ``--poll-interval 0.5s`` is half a
second); a malformed or non-positive value exits 2 naming the flag, the value and the rule. Job
lifetimes go to the Jobs API as whole seconds written with their unit (``format_duration``):
huggingface_hub reads a string ending in ``s``, ``m``, ``h`` or ``d`` as that unit
(``_create_job_spec``) and anything else through ``int()``, so ``"6H"`` would raise deep in the
client, after the bucket was made and the wheel uploaded; ``6H`` here is read, then written
``6h``.
"""

from __future__ import annotations

import argparse
import math

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
RULE = "a number of seconds, or a number and a unit s, m, h or d (e.g. 90s, 30m, 6h)"


def parse_duration(text: str) -> float:
    """Seconds of ``text`` (see the module docstring); ValueError saying what is wrong."""
    cleaned = text.strip().lower()
    unit = cleaned[-1:] if cleaned[-1:] in UNITS else "s"
    number = _number(cleaned[:-1] if cleaned[-1:] in UNITS else cleaned)
    if number is None:
        raise ValueError(f"{RULE}, not {text!r}")
    seconds = number * UNITS[unit]
    if seconds <= 0:
        raise ValueError(f"must be longer than 0 (got {text!r})")
    return seconds


def duration(text: str) -> float:
    """``parse_duration`` as an argparse ``type`` (its message after ``argument --FLAG:``)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def whole_seconds(seconds: float) -> int:
    """A job lifetime as the Jobs API counts it: whole seconds (truncated, as the client does),
    at least one."""
    return max(int(seconds), 1)


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
