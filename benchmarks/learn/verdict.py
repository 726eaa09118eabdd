"""Whether a run learned, from TRL's per-step figures: the mean reward of the last ``WINDOW``
steps beats the first ``WINDOW`` steps' by at least ``SPREADS`` times the first steps' spread
(their standard deviation, floored at ``MIN_SPREAD`` so that a flat start cannot make any rise
pass), and TRL's ``kl`` (the sampler's logprobs against the trainer's policy) stays under
``KL_BOUND`` at every step but the few ``KL_SPIKES`` allows. Pure.

Why a few: a step's ``kl`` is the mean over its ~700 tokens of ``(r - 1) - log r``, ``r`` a
token's probability under the trainer's weights over the sampler's; it is unbounded in one
token's ratio. In honest runs of this recipe (no replica lying) a handful of tokens per step move
4-9 nats between a version and the next (the tokens' log-ratios, read inside TRL's loss): one
such token alone lifts its step to 0.1-0.2, one that rose 7 nats to 1.4 (seen once in CI, every
other step of that run under 0.06). A systematic gap between sampler and trainer (another
tokenisation, another LoRA scaling, another model) shows at every step instead."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

WINDOW = 5
SPREADS = 3.0
MIN_SPREAD = 0.01
# Measured at the benchmark's recipe (lr 5e-3, staleness 1, 30 steps), the kl left once the 3
# highest steps are set aside: 0.02-0.13 in honest runs through the fleet (their highest steps
# 0.03-1.39), 0.07 with a replica answering the base model under every adapter's name left in
# routing (the probe off). TRL's kl does not reveal that replica (the probe does, and the reward
# shows it: 0.36 -> 0.43 there); the bound catches a sampler and trainer that disagree throughout.
KL_BOUND = 0.5
KL_SPIKES = 0.1  # the share of steps (rounded down) whose kl may pass the bound: single tokens


@dataclass(frozen=True)
class Verdict:
    steps: int
    first_mean: float
    last_mean: float
    spread: float
    margin: float  # last_mean - first_mean
    wanted: float  # SPREADS * spread: the margin a run must beat
    kl_max: float
    kl_typical: float  # the highest kl once the KL_SPIKES share of highest steps is set aside
    learned: bool
    on_policy: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return (f"reward {self.first_mean:.3f} -> {self.last_mean:.3f} (first/last {WINDOW} "
                f"steps; margin {self.margin:.3f}, wanted > {self.wanted:.3f}); kl max "
                f"{self.kl_max:.3f}, {self.kl_typical:.3f} without its {spikes(self.steps)} "
                f"highest steps (bound {KL_BOUND})")  # fmt: skip


def judge(steps: Sequence[dict[str, float]]) -> Verdict:
    """The verdict on a run's steps (each with ``reward`` and ``kl``); ValueError if it has
    fewer than two windows of steps."""
    if len(steps) < 2 * WINDOW:
        raise ValueError(f"{len(steps)} steps logged: a verdict needs {2 * WINDOW}")
    rewards = [step["reward"] for step in steps]
    first, last = rewards[:WINDOW], rewards[-WINDOW:]
    spread = max(statistics.pstdev(first), MIN_SPREAD)
    margin = statistics.fmean(last) - statistics.fmean(first)
    kl = sorted(step.get("kl", 0.0) for step in steps)
    return Verdict(
        steps=len(steps),
        first_mean=statistics.fmean(first),
        last_mean=statistics.fmean(last),
        spread=spread,
        margin=margin,
        wanted=SPREADS * spread,
        kl_max=kl[-1],
        kl_typical=kl[-1 - spikes(len(kl))],
        learned=margin > SPREADS * spread,
        on_policy=kl[-1 - spikes(len(kl))] < KL_BOUND,
    )


def spikes(steps: int) -> int:
    """How many of ``steps`` steps' kl may pass the bound."""
    return int(steps * KL_SPIKES)
