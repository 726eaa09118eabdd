"""The published run's reward: the LAST ``\\boxed{}`` of a completion against the gold answer.

Rules (the write-up's grader, each tested in ``tests/unit/test_boxed_reward.py``):

1. The answer is the content of the last ``\\boxed{...}`` (braces balanced, so
   ``\\boxed{\\frac{1}{2}}`` is whole); a model that boxes a draft and then a correction is
   graded on the correction. No box: 0.
2. Both sides are normalised as LaTeX before comparing: ``$``, spaces, ``\\left``/``\\right``,
   ``\\!``/``\\,``, ``\\dfrac``/``\\tfrac``, ``^\\circ``/``^{\\circ}``, ``\\%``, ``\\text{...}``
   wrappers, a trailing period, thousands separators and a leading ``x =`` are dropped. Equal
   strings, or equal numbers (integers, decimals, ``a/b`` and ``\\frac{a}{b}``), score 1.
3. Otherwise, when ``math_verify`` is installed, a symbolic comparison decides
   (``\\sqrt{4}`` = 2, ``0.5`` = ``\\frac12``). Its timeouts use signals, which only the main
   thread may set, and TRL scores rollouts in a worker thread: they are turned off here.
4. A rollout that did not end within its budget (its last token is not an end-of-sequence or
   pad token: TRL's own definition of a clipped completion) scores 0, whatever it boxed.

The gold answer is taken from its last box when it has one, else after its last ``####`` (GSM8K's
worked solutions end ``#### 72``), else whole. Unlike
TRL's ``accuracy_reward`` (first box; a gold answer that does not parse drops the sample), every
sample gets a score. Pure functions but ``_symbolic``; nothing heavy is imported at module level
(TRL pickles reward functions into a spawned process).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

_BOX = "\\boxed{"
_SPACING = re.compile(r"\\[!,;:]|\\left|\\right|\\displaystyle|\s+|\$")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_DEGREES = re.compile(r"\^\{?\\circ\}?")
_FRAC = re.compile(r"\\frac\{([^{}]+)\}\{([^{}]+)\}")
_SHORT_FRAC = re.compile(r"\\frac(\d)(\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?:\D|$))")
_ASSIGNMENT = re.compile(r"^[a-zA-Z]=")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text``, braces balanced; None without one."""
    start = text.rfind(_BOX)
    while start != -1:
        depth, i = 1, start + len(_BOX)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(_BOX) : i - 1]
        start = text.rfind(_BOX, 0, start)  # an unclosed last box: the one before it
    return None


def normalise(answer: str) -> str:
    """An answer's canonical LaTeX text (rule 2)."""
    text = answer.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _TEXT.sub(r"\1", text)
    text = _DEGREES.sub("", text).replace("\\%", "").replace("%", "")
    text = _SPACING.sub("", text)
    text = _SHORT_FRAC.sub(r"\\frac{\1}{\2}", text)
    text = _THOUSANDS.sub("", text)
    text = _ASSIGNMENT.sub("", text)
    return text.rstrip(".")


def as_number(text: str) -> Fraction | None:
    """A normalised answer as an exact number, if it is one."""
    match = _FRAC.fullmatch(text)
    if match:
        text = f"{match.group(1)}/{match.group(2)}"
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def same_answer(got: str, gold: str) -> bool:
    """Whether two answers agree: as text, as numbers, then symbolically (rules 2 and 3)."""
    a, b = normalise(got), normalise(gold)
    if a == b:
        return True
    x, y = as_number(a), as_number(b)
    if x is not None and y is not None:
        return x == y
    return _symbolic(got, gold)


def _symbolic(got: str, gold: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:
        return False
    try:  # timeouts off: they need the main thread (module docstring, rule 3)
        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        got_parsed = parse(f"${got}$", parsing_timeout=None)
        return bool(
            gold_parsed and got_parsed and verify(gold_parsed, got_parsed, timeout_seconds=None)
        )
    except Exception:  # a grader that cannot parse an answer has not matched it
        return False


def gold_answer(text: str) -> str:
    """The answer a gold text holds (module docstring)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    _, marker, after = text.rpartition("####")
    return after.strip() if marker else text


class BoxedReward:
    """TRL reward function (a picklable instance): 1.0 when the last box matches the gold answer
    and the rollout ended within its budget, else 0.0 (module docstring)."""

    __name__ = "boxed_reward"  # TRL names reward columns after their callables

    def __init__(self, end_token_ids: Sequence[int]) -> None:
        self.end_token_ids = frozenset(end_token_ids)

    def __call__(
        self,
        completions: Sequence[Any],
        answer: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **_: Any,
    ) -> list[float]:
        from trainer_entry.rewards import completion_text

        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        scores = []
        for completion, gold, tokens in zip(completions, answer, ids, strict=True):
            if tokens is not None and (not tokens or tokens[-1] not in self.end_token_ids):
                scores.append(0.0)  # hit the length budget without ending (rule 4)
                continue
            got = last_boxed(completion_text(completion))
            expected = gold_answer(str(gold))
            scores.append(1.0 if got is not None and same_answer(got, expected) else 0.0)
        return scores
