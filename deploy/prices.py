"""What a run costs: per hour, each job's flavor at HF Jobs' list price; at most, each job at its
price for its whole lifetime (its ``timeout``, the cap the Jobs API enforces).

The prices are huggingface_hub's hardware table as docs/deploy.md ("What it costs") shows it
(``hf jobs hardware`` lists the live ones); a flavor missing here is reported as unknown, never
guessed. tests/docs checks every dollar figure the docs give against these prices and the plans;
``up --dry-run`` prints both figures of its plan (``plan_cost``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from deploy.specs import JobSpec
from proxy.config.units import parse_seconds

DOLLARS_PER_HOUR = {
    "cpu-upgrade": 0.03,
    "a10g-large": 1.50,
    "l40sx1": 1.80,
    "a100-large": 2.50,
    "h200": 5.00,
    "h200x2": 10.00,
}


def cost_per_hour(specs: Iterable[JobSpec]) -> str:
    """``$25.03 per hour (2 x h200, 1 x h200x2, ...)``, naming any flavor without a price."""
    counts: dict[str, int] = {}
    for spec in specs:
        counts[spec.flavor] = counts.get(spec.flavor, 0) + 1
    known = sum(DOLLARS_PER_HOUR[f] * n for f, n in counts.items() if f in DOLLARS_PER_HOUR)
    parts = ", ".join(f"{n} x {flavor}" for flavor, n in counts.items())
    unknown = sorted(flavor for flavor in counts if flavor not in DOLLARS_PER_HOUR)
    line = f"${known:.2f} per hour ({parts})"
    if unknown:
        line += f", plus {', '.join(unknown)} (no price here: `hf jobs hardware` lists it)"
    return line


def cost_cap(specs: Iterable[JobSpec]) -> float | None:
    """Dollars if every job runs once for its whole ``timeout`` (None: a flavor has no price)."""
    total = 0.0
    for spec in specs:
        if spec.flavor not in DOLLARS_PER_HOUR:
            return None
        total += DOLLARS_PER_HOUR[spec.flavor] * float(parse_seconds(spec.timeout)) / 3600
    return total


def plan_cost(specs: Sequence[JobSpec]) -> str:
    """The line ``up --dry-run`` ends with: the plan's cost per hour and the bound its caps set."""
    cap = cost_cap(specs)
    bound = (
        f"its time caps bound it at ${cap:,.2f} if nobody stops it (each job run once for its "
        "whole timeout)"
        if cap is not None
        else "no bound without every flavor's price"
    )
    return f"this plan costs {cost_per_hour(specs)}; {bound}"
