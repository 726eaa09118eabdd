"""``deploy up``'s flags for a fleet that sizes itself: ``--replica-count MIN..MAX`` turns the
scaler on (a plain N stays a fixed fleet), ``--budget-per-h``, ``--max-launches-per-h`` and
``--scale-policy`` bound and tune it. Each bad value exits 2 naming its flag, the value and the
rule (``check_scale_args``); ``scaling_of`` reads them into the plan's ``Scaling``.

Off unless asked. Refused, each in one line saying what to do: a range with ``--fleet`` or
``deploy fleet up`` (a shared fleet's replicas serve several runs: one run's trainer must not
size them), with ``--network public`` (a replica the scaler launches is found, and mapped to
its job, by its alias in the run's network group), and the three tuning flags without a range.
A budget must pay for the range's minimum beside the run's other jobs, at deploy's prices
(``deploy.prices``): a flavor without a price there cannot be budgeted.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, replace

from deploy.plan import RunPlan
from deploy.plan_jobs import scaler_config
from deploy.prices import DOLLARS_PER_HOUR
from deploy.scaler.config import DURATIONS, MAX_LAUNCHES_PER_H, Scaling, policy_names
from deploy.scaler.decide import Policy
from proxy.config.units import parse_seconds

RANGE = re.compile(r"^(\d+)\.\.(\d+)$")


@dataclass(frozen=True)
class ReplicaCount:
    """``--replica-count``: N replica jobs, or ``MIN..MAX`` (the scaler on, starting at MIN)."""

    low: int
    high: int
    ranged: bool = False

    def __str__(self) -> str:
        return f"{self.low}..{self.high}" if self.ranged else str(self.low)


class ReplicaCountArg:
    """argparse's ``type`` for ``--replica-count``: ``3`` or ``1..4``."""

    __name__ = "replica count"

    def __call__(self, text: str) -> ReplicaCount:
        if text.strip().lstrip("-").isdigit():
            count = int(text)
            return ReplicaCount(count, count)
        match = RANGE.match(text.strip())
        if match is None:
            raise argparse.ArgumentTypeError(
                f"a count N or a range MIN..MAX, e.g. 3 or 1..4 (got {text!r})"
            )
        return ReplicaCount(int(match[1]), int(match[2]), ranged=True)


def add_scale_flags(up: argparse.ArgumentParser) -> None:
    add = up.add_argument
    add(
        "--budget-per-h",
        type=float,
        default=None,
        metavar="DOLLARS",
        help="with --replica-count MIN..MAX: the most the run may cost per hour, all its jobs "
        "counted at deploy's prices; the scaler never launches past it (default: none)",
    )
    add(
        "--max-launches-per-h",
        type=int,
        default=None,
        metavar="N",
        help=f"with --replica-count MIN..MAX: replica launches an hour at most (default: "
        f"{MAX_LAUNCHES_PER_H})",
    )
    add(
        "--scale-policy",
        default=None,
        metavar="NAME=VALUE,...",
        help="with --replica-count MIN..MAX: the scaler's thresholds, e.g. window=30s,"
        f"cooldown=2m (names: {', '.join(policy_names())}; durations take s, m, h; default: "
        "sized for real runs, docs/deploy.md)",
    )


def check_scale_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject what the scaler cannot honour (module docstring), naming the flag."""
    count: ReplicaCount | None = args.replicas
    shared = getattr(args, "shared", False) or getattr(args, "fleet", None) is not None
    if count is not None and count.ranged:
        if not 1 <= count.low <= count.high:
            parser.error(f"argument --replica-count: MIN..MAX needs 1 <= MIN <= MAX (got {count})")
        if shared:
            parser.error(
                "argument --replica-count: a range sizes a run's own fleet; a shared fleet's "
                "replicas serve several runs (--fleet, deploy fleet up): give a count"
            )
        if args.network == "public":
            parser.error(
                "argument --replica-count: a fleet that sizes itself needs the run's private "
                "network (the scaler finds each replica it launches by its alias there): drop "
                "--network public, or give a count"
            )
    ranged = count is not None and count.ranged
    for flag, value in (
        ("--budget-per-h", getattr(args, "budget_per_h", None)),
        ("--max-launches-per-h", getattr(args, "max_launches_per_h", None)),
        ("--scale-policy", getattr(args, "scale_policy", None)),
    ):
        if value is not None and not ranged:
            parser.error(f"argument {flag}: only with --replica-count MIN..MAX (the scaler)")
    if not ranged:
        return
    if args.max_launches_per_h is not None and args.max_launches_per_h < 1:
        parser.error(f"argument --max-launches-per-h: at least 1 (got {args.max_launches_per_h})")
    if args.budget_per_h is not None and args.budget_per_h <= 0:
        parser.error(f"argument --budget-per-h: above 0 (got {args.budget_per_h:g})")
    try:
        parse_policy(args.scale_policy or "")
    except ValueError as exc:
        parser.error(f"argument --scale-policy: {exc}")


def parse_policy(text: str) -> dict[str, float]:
    """``window=30s,add_wait=0.2`` -> the fields they set (``window_s`` 30.0, ``add_wait``
    0.2); ValueError naming the bad part."""
    names = policy_names()
    chosen: dict[str, float] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, equals, value = part.partition("=")
        name = name.strip().replace("-", "_")
        if not equals or name not in names:
            raise ValueError(f"{part!r} is not NAME=VALUE with NAME one of {', '.join(names)}")
        field_name = names[name]
        if name in DURATIONS:
            number = float(parse_seconds(value.strip()))
            if number <= 0:
                raise ValueError(f"{name} must be above 0 (got {value!r})")
        else:
            number = _ratio(name, value)
        chosen[field_name] = number
    policy = {k: v for k, v in chosen.items() if k != "drain_timeout_s"}
    made = replace(Policy(), **policy)
    if made.add_wait <= made.retire_wait:
        raise ValueError(
            f"add_wait ({made.add_wait:g}) must be above retire_wait ({made.retire_wait:g}): "
            "the gap between them keeps the fleet from flapping"
        )
    return chosen


def _ratio(name: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} takes a number (got {value!r})") from None
    if not 0 <= number <= (1 if name != "payback" else 100):
        raise ValueError(f"{name} out of range (got {value!r})")
    return number


def scaling_of(args: argparse.Namespace) -> Scaling | None:
    """The plan's ``Scaling`` from checked flags (None: a fixed fleet)."""
    count: ReplicaCount | None = args.replicas
    if count is None or not count.ranged:
        return None
    chosen = parse_policy(getattr(args, "scale_policy", None) or "")
    drain = chosen.pop("drain_timeout_s", None)
    scaling = Scaling(
        count.low,
        count.high,
        budget_per_h=args.budget_per_h,
        max_launches_per_h=args.max_launches_per_h or MAX_LAUNCHES_PER_H,
        policy=replace(Policy(), **chosen),
    )
    return scaling if drain is None else replace(scaling, drain_timeout_s=drain)


def budget_refusal(plan: RunPlan) -> str | None:
    """Why the plan's budget cannot be kept (one line naming the flag), or None."""
    scale = plan.scale
    if scale is None or scale.budget_per_h is None:
        return None
    flavors = [plan.flavors.replica, plan.flavors.trainer]
    if plan.topology == "job":
        flavors.append(plan.flavors.proxy)
    unpriced = sorted({flavor for flavor in flavors if flavor not in DOLLARS_PER_HOUR})
    if unpriced:
        return (
            f"argument --budget-per-h: deploy has no price for {', '.join(unpriced)} "
            "(`hf jobs hardware` lists it): choose a priced flavor, or drop the budget"
        )
    bounds = scaler_config(plan).bounds()
    if not bounds.affordable(scale.min_replicas):
        least = bounds.fixed_per_h + scale.min_replicas * bounds.replica_per_h
        return (
            f"argument --budget-per-h: ${scale.budget_per_h:.2f}/h does not pay for the "
            f"range's minimum of {scale.min_replicas} replica(s) beside the run's other jobs "
            f"(${least:.2f}/h): raise the budget or lower MIN"
        )
    return None


def scaler_summary(plan: RunPlan) -> str | None:
    """What ``up`` (and its ``--dry-run``) says of the scaler: its bounds and thresholds, and
    what the run costs an hour at each end of its range (None: a fixed fleet)."""
    scale = plan.scale
    if scale is None:
        return None
    config = scaler_config(plan)
    bounds = config.bounds()
    low = bounds.fixed_per_h + scale.min_replicas * bounds.replica_per_h
    top = bounds.ceiling()
    high = bounds.fixed_per_h + top * bounds.replica_per_h
    capped = f" (the budget allows {top})" if top < scale.max_replicas else ""
    priced = plan.flavors.replica in DOLLARS_PER_HOUR
    cost = (
        f"as it scales the run costs ${low:.2f} to ${high:.2f} per hour ({scale.min_replicas} "
        f"to {top} x {plan.flavors.replica}{capped}, beside its other jobs' "
        f"${bounds.fixed_per_h:.2f})"
        if priced
        else f"{plan.flavors.replica} has no price here: the scaler's cost is not shown"
    )
    return (
        f"the scaler (in the trainer job): {scale.describe()}; it starts with "
        f"{scale.min_replicas}; {cost}; the jobs it launches come on top of the bound above, "
        "each for at most its timeout"
    )
