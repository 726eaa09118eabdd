"""Reward functions for math problems, in TRL's reward-function shape.

TRL's rollout worker runs in a spawned process and pickles these by reference, so they live at
module level and import nothing heavy. Each receives the group's ``completions`` (a list of message
lists for chat prompts, or of strings) plus every other dataset column as a keyword list, and
returns one float per completion (``None`` where a completion cannot be scored).

``math`` and ``format`` read ``<think>...</think> Answer: N`` (what the generated datasets' system
prompt asks for); ``boxed`` is the published run's grader (``trainer_entry.boxed``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# `<think>...</think> Answer: 42`: the shape the system prompt of our datasets asks for.
_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*Answer:\s*-?[\d,]+(?:\.\d+)?\s*$", re.DOTALL)
_ANSWER = re.compile(r"Answer:\s*(-?[\d,]*\.?\d+)")
_BOXED = re.compile(r"\\boxed\{\s*(-?[\d,]*\.?\d+)\s*\}")
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def completion_text(completion: Any) -> str:
    """The text of a completion: the assistant messages' contents joined, or the string itself."""
    if isinstance(completion, str):
        return completion
    parts = [m.get("content") or "" for m in completion if m.get("role") == "assistant"]
    return "\n".join(p if isinstance(p, str) else "" for p in parts)


def final_number(text: str) -> float | None:
    """The number after the last ``Answer:``, else in the last ``\\boxed{}``, else None."""
    for pattern in (_ANSWER, _BOXED):
        found = pattern.findall(text)
        if found:
            return _to_float(found[-1])
    return None


def gold_number(answer: Any) -> float | None:
    """A reference answer: a number, or text whose number follows ``####`` (GSM8K) or ends it."""
    if isinstance(answer, int | float):
        return float(answer)
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    found = _NUMBER.findall(text)
    return _to_float(found[-1]) if found else None


def math_answer_reward(
    completions: Sequence[Any], answer: Sequence[Any], **_: Any
) -> list[float | None]:
    """1.0 when the completion's final number equals the reference, 0.0 otherwise; None when the
    reference has no number (unscorable rows are left out of the advantage by TRL)."""
    rewards: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        expected = gold_number(gold)
        if expected is None:
            rewards.append(None)
            continue
        got = final_number(completion_text(completion))
        rewards.append(1.0 if got is not None and abs(got - expected) < 1e-6 else 0.0)
    return rewards


def format_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    """0.5 for a completion shaped ``<think>...</think> Answer: N``, 0.0 otherwise."""
    return [0.5 if _FORMAT.match(completion_text(c)) else 0.0 for c in completions]


REWARDS = {"math": math_answer_reward, "format": format_reward}
# ``boxed`` (the published run's grader, ``trainer_entry.boxed``) needs the model's end tokens.
REWARD_NAMES = (*REWARDS, "boxed")


class RewardError(ValueError):
    """A ``module:function`` reward that cannot be imported; the message says which."""


def is_custom(name: str) -> bool:
    """``module:function``: a reward function of the user's own (importable in TRL's rollout
    worker, a spawned process, so it must live in a module, not in a notebook)."""
    module, _, function = name.partition(":")
    return bool(module and function.isidentifier())


def reward_functions(names: Sequence[str], end_token_ids: Sequence[int]) -> list[Any]:
    """The reward callables for ``names`` (each from ``REWARD_NAMES`` or ``module:function``),
    in that order."""
    from trainer_entry.boxed import BoxedReward

    out: list[Any] = []
    for name in names:
        if name == "boxed":
            out.append(BoxedReward(end_token_ids))
        elif name in REWARDS:
            out.append(REWARDS[name])
        else:
            out.append(_import(name))
    return out


def _import(spec: str) -> Any:
    import importlib

    module, _, function = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise RewardError(f"--rewards {spec}: cannot import it ({exc})") from exc
    if not callable(found):
        raise RewardError(f"--rewards {spec}: not a function")
    return found


def _to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None
