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
