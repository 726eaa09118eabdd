"""A reward for the end-to-end tier that gives the tiny model's random completions different
scores, so GRPO's advantages are not all zero and the adapter really trains (``lora_B`` leaves
its zero init): a resume that reverted a shard would then show. Passed as
``--rewards tests.e2e.rewards:length_reward`` (a ``module:function`` reward, as a user's own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def length_reward(completions: Sequence[Any], **_: Any) -> list[float]:
    """Shorter completions score higher: minus a hundredth a character (the tiny model's
    32-token completions differ in length by tens of characters, unclipped)."""
    from trainer_entry.rewards import completion_text

    return [-len(completion_text(c)) / 100 for c in completions]
