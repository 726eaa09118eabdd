"""What the rollouts look like: prompts (token ids) and how many tokens each answer has.

Every figure is drawn from a generator seeded by the rollout's identity (group, rollout, turn),
never by the order things happen in, so every policy is measured on the same traffic.

- ``uniform``: GRPO on short math prompts (a 64-token template + 64-256 token problems), answers
  of 30-50 % of ``max_tokens``, all alike;
- ``long_tail``: the same prompts, reasoning lengths log-normal around a quarter of
  ``max_tokens`` (sigma 0.8), cut at ``max_tokens`` (about 4 % hit it);
- ``multi_turn``: 3 turns per rollout, each answer log-normal around 200 tokens and a 100-token
  tool output between turns: every turn re-sends the whole conversation, contexts grow;
- ``shared_prefix``: each group's 8 prompts share a 2,000-token prefix (a document, a few-shot
  preamble, a tool transcript) and end in their own 64-token suffix; short answers (100-300).

Lengths that change over a run (``Lengths``, the elastic study): every answer's length, and the
cut it is drawn under, are multiplied by a factor of the trainer's step when the request is sent,
linear from 1 at step 0 to ``end`` at ``over_steps`` (then held), and cut at ``max_tokens``;
the draw itself stays the rollout's own, so a rollout's length at factor f is f times its length
at 1 (to the rounding) while f x the cut stays within ``max_tokens``. The default (``end`` 1)
changes nothing.
"""

from __future__ import annotations

import math
import random
from array import array
from dataclasses import dataclass

import xxhash

VOCAB_BYTES = 2  # token ids < 65,536


def tokens(seed: int, count: int) -> list[int]:
    """``count`` deterministic token ids for ``seed`` (C-level: randbytes into an array)."""
    if count <= 0:
        return []
    return array("H", random.Random(seed).randbytes(VOCAB_BYTES * count)).tolist()


def _seed(*parts: object) -> int:
    return xxhash.xxh64_intdigest("|".join(map(str, parts)).encode())


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length multiplier over the run: 1 at step 0, ``end`` at step ``over_steps``, linear."""

    end: float = 1.0
    over_steps: int = 1

    def factor(self, step: int) -> float:
        if self.end == 1.0:
            return 1.0
        return 1.0 + (self.end - 1.0) * min(step / self.over_steps, 1.0)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    template_tokens: int = 64
    problem_tokens: tuple[int, int] = (64, 256)
    suffix_tokens: int = 0
    turns: int = 1
    tool_tokens: int = 100
    decode: str = "uniform"  # uniform: (lo, hi); lognormal: (median, sigma)
    decode_params: tuple[float, float] = (0.3, 0.5)
    decode_cap: int | None = None  # tokens; None: max_tokens
    seed: int = 0
    lengths: Lengths = Lengths()  # how answer lengths change over the run (module docstring)

    def group_prefix(self, group: int) -> list[int]:
        """What every rollout of ``group`` starts with: the template, then the problem."""
        lo, hi = self.problem_tokens
        length = random.Random(_seed(self.seed, "len", group)).randint(lo, hi)
        return tokens(_seed(self.seed, "template"), self.template_tokens) + tokens(
            _seed(self.seed, "problem", group), length
        )

    def first_prompt(self, prefix: list[int], group: int, rollout: int) -> list[int]:
        if not self.suffix_tokens:
            return prefix
        return prefix + tokens(_seed(self.seed, "suffix", group, rollout), self.suffix_tokens)

    def answer_tokens(
        self, group: int, rollout: int, turn: int, max_tokens: int, step: int = 0
    ) -> int:
        """The answer's length; at ``step``, times ``lengths``'s factor (module docstring)."""
        rng = random.Random(_seed(self.seed, "decode", group, rollout, turn))
        cap = min(self.decode_cap or max_tokens, max_tokens)
        a, b = self.decode_params
        if self.decode == "uniform":  # shares of max_tokens below 1, tokens above
            length = rng.uniform(a, b) * (max_tokens if b <= 1 else 1)
        else:  # median (a share of max_tokens below 1, tokens above), sigma
            length = math.exp(rng.gauss(math.log(a * max_tokens if a < 1 else a), b))
        factor = self.lengths.factor(step)
        if factor != 1.0:
            return max(1, min(int(length * factor), int(cap * factor), max_tokens))
        return max(1, min(int(length), cap))

    def answer(self, group: int, rollout: int, turn: int, length: int) -> list[int]:
        return tokens(_seed(self.seed, "answer", group, rollout, turn), length)

    def tool_output(self, group: int, rollout: int, turn: int) -> list[int]:
        return tokens(_seed(self.seed, "tool", group, rollout, turn), self.tool_tokens)


WORKLOADS = {
    "uniform": Workload("uniform"),
    "long_tail": Workload("long_tail", decode="lognormal", decode_params=(0.3, 0.8)),
    "multi_turn": Workload(
        "multi_turn", turns=3, decode="lognormal", decode_params=(200, 0.6), decode_cap=1024
    ),
    "shared_prefix": Workload(
        "shared_prefix",
        problem_tokens=(2000, 2000),
        suffix_tokens=64,
        decode="uniform",
        decode_params=(100, 300),
    ),
}
