"""What each dataset row's prompt becomes: the conversation TRL sends, with the format
instruction that asks for the answer shape the rewards read.

A reward that reads ``<think>...</think> Answer: N`` (``format``, ``math``) or the last
``\\boxed{}`` (``boxed``) scores 0 on a model never told to write it, so the trainer adds one
instruction to every prompt's system turn (``--format-instruction``; ``auto``: the one for the
rewards chosen, none for rewards of the user's own; ``""``: none). A text prompt becomes
``[system, user]`` (the system turn: ``--system-prompt`` then the instruction); a conversation
gets the instruction appended to its system turn, or a system turn of its own, unless its system
turn says it already (``trainer_entry.math_data``'s rows do). Pure: the core suite builds rows
without torch or datasets.

The rewards follow the prompts too: ``--rewards auto`` (the default) reads what a dataset's own
prompts ask for (``asked_shape``: its first row's system turn, or its text) and grades that
(``REWARDS_FOR``: ``Answer: N`` -> ``math,format``, ``\\boxed{}`` -> ``boxed``; prompts that ask
for neither, or a dataset the launcher cannot read before the run (a Hub one): ``boxed``, the
published run's grader). Rewards named on the command line that read one shape while the prompts
ask for the other are said in one line at start (``shape_mismatch``): each prompt would then ask
for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

AUTO = "auto"
# Exactly what `format` and `math` match (trainer_entry.rewards) and math_data's rows end with.
THINK_ANSWER = (
    "Think step by step inside <think> and </think>, then write Answer: followed by the final "
    "number and nothing else."
)
# What `boxed` grades (the last box), as Qwen2.5-Math's own system prompt asks for it.
BOXED = "Please reason step by step, and put your final answer within \\boxed{}."

Message = dict[str, Any]

# The answer shapes prompts ask for, the built-in rewards that grade each, and what each reads
# (``math`` reads a box when a completion has no ``Answer:``).
ANSWER, BOXED_SHAPE = "Answer: N", "\\boxed{}"
REWARDS_FOR = {ANSWER: ("math", "format"), BOXED_SHAPE: ("boxed",)}
DEFAULT_REWARDS = ("boxed",)  # the published run's grader
_READS = {"math": (ANSWER, BOXED_SHAPE), "format": (ANSWER,), "boxed": (BOXED_SHAPE,)}
_MARKERS = ((ANSWER, "Answer:"), (BOXED_SHAPE, "\\boxed"))


def asked_shape(prompt: object) -> str | None:
    """The answer shape a row's own prompt asks for (its system turn, or its text), or None:
    neither, or both."""
    if isinstance(prompt, list):
        turns = [m for m in prompt if isinstance(m, dict) and m.get("role") == "system"]
        text = str(turns[0].get("content") or "") if turns else ""
    else:
        text = prompt if isinstance(prompt, str) else ""
    asked = {shape for shape, marker in _MARKERS if marker in text}
    return asked.pop() if len(asked) == 1 else None


def default_rewards(shape: str | None) -> tuple[str, ...]:
    """``--rewards auto``: the built-in rewards that grade ``shape``."""
    return REWARDS_FOR.get(shape or "", DEFAULT_REWARDS)


def shape_mismatch(rewards: Sequence[str], shape: str | None) -> str | None:
    """One line when a built-in reward of ``rewards`` cannot read the shape the prompts ask
    for (``shape``), else None."""
    blind = [name for name in rewards if name in _READS and shape not in _READS[name]]
    if shape is None or not blind:
        return None
    return (
        f"the dataset's prompts ask for {shape}, which --rewards {','.join(blind)} cannot read: "
        f"each prompt will ask for both shapes; use --rewards {','.join(REWARDS_FOR[shape])} "
        "(or auto), or prompts that ask for what the rewards read"
    )


def instruction_for(rewards: Sequence[str], flag: str = AUTO) -> str:
    """The instruction ``--format-instruction`` means for ``rewards`` ("" for none)."""
    if flag != AUTO:
        return flag
    if {"format", "math"} & set(rewards):
        return THINK_ANSWER
    if "boxed" in rewards:
        return BOXED
    return ""  # rewards of the user's own: their dataset's prompts say what they read


def conversation(
    prompt: str | list[Message], system: str | None, instruction: str
) -> list[Message]:
    """The messages TRL sends for one row's ``prompt`` (see the module docstring)."""
    if isinstance(prompt, str):
        head = "\n\n".join(part for part in (system, instruction) if part)
        return [
            *([{"role": "system", "content": head}] if head else []),
            {"role": "user", "content": prompt},
        ]
    messages = [dict(message) for message in prompt]
    if not instruction:
        return messages
    if messages and messages[0].get("role") == "system":
        content = str(messages[0].get("content") or "")
        if instruction not in content:
            messages[0]["content"] = f"{content}\n\n{instruction}" if content else instruction
        return messages
    return [{"role": "system", "content": instruction}, *messages]
