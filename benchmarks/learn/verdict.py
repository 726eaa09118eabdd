"""Whether a run learned, from TRL's per-step figures: the mean reward of the last ``WINDOW``
steps beats the first ``WINDOW`` steps' by at least ``SPREADS`` times the first steps' spread
(their standard deviation, floored at ``MIN_SPREAD`` so that a flat start cannot make any rise
pass), and TRL's ``kl`` (the sampler's logprobs against the trainer's policy) stays under
``KL_BOUND`` at every step. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

WINDOW = 5
SPREADS = 3.0
MIN_SPREAD = 0.01
# Measured at the benchmark's recipe (lr 5e-3, staleness 1, 30 steps): at most 0.06 through the
# fleet and 0.08 direct; a replica answering the base model under the adapter's name and left
# in routing pushes it up as the adapter moves away from the base (README, "A run that learns").
KL_BOUND = 0.5


@dataclass(frozen=True)
class Verdict:
    steps: int
    first_mean: float
    last_mean: float
    spread: float
    margin: float  # last_mean - first_mean
    wanted: float  # SPREADS * spread: the margin a run must beat
    kl_max: float
    learned: bool
    on_policy: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (f"reward {self.first_mean:.3f} -> {self.last_mean:.3f} (first/last {WINDOW} "
                f"steps; margin {self.margin:.3f}, wanted > {self.wanted:.3f}); kl max "
                f"{self.kl_max:.3f} (bound {KL_BOUND})")  # fmt: skip


def judge(steps: Sequence[dict[str, float]]) -> Verdict:
    """The verdict on a run's steps (each with ``reward`` and ``kl``); ValueError if it has
    fewer than two windows of steps."""
    if len(steps) < 2 * WINDOW:
        raise ValueError(f"{len(steps)} steps logged: a verdict needs {2 * WINDOW}")
    rewards = [step["reward"] for step in steps]
    first, last = rewards[:WINDOW], rewards[-WINDOW:]
    spread = max(statistics.pstdev(first), MIN_SPREAD)
    margin = statistics.fmean(last) - statistics.fmean(first)
    kl_max = max(step.get("kl", 0.0) for step in steps)
    return Verdict(
        steps=len(steps),
        first_mean=statistics.fmean(first),
        last_mean=statistics.fmean(last),
        spread=spread,
        margin=margin,
        wanted=SPREADS * spread,
        kl_max=kl_max,
        learned=margin > SPREADS * spread,
        on_policy=kl_max < KL_BOUND,
    )
