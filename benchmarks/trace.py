"""GRPO-shaped traffic: P prompts sharing a chat template, G rollouts each, optional turns.

A trace is data, not I/O: ``Rollout`` objects list the token-id prompt of each turn. Later turns
extend the conversation (previous prompt + the model's answer + the next user message), so the
replay needs the answer of turn k to build turn k+1; ``next_prompt`` does that.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TraceShape:
    prompts: int = 32  # P: distinct problems
    group_size: int = 8  # G: rollouts per problem (TRL's num_generations)
    turns: int = 2  # turns per rollout (1 = single-turn)
    template_tokens: int = 64  # shared chat template / system prompt
    problem_tokens: tuple[int, int] = (48, 160)  # min, max tokens of each problem statement
    user_tokens: int = 12  # tokens of each follow-up user message
    max_tokens: int = 32  # tokens generated per turn
    vocab: int = 1000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Group:
    index: int
    prompt: tuple[int, ...]  # template + problem: the first turn's prompt
    follow_ups: tuple[tuple[int, ...], ...]  # the user message of each later turn


def build_groups(shape: TraceShape) -> list[Group]:
    """The trace's groups, deterministic from ``shape.seed``."""
    rng = random.Random(shape.seed)
    template = tuple(rng.randrange(shape.vocab) for _ in range(shape.template_tokens))
    groups = []
    for index in range(shape.prompts):
        length = rng.randint(*shape.problem_tokens)
        problem = tuple(rng.randrange(shape.vocab) for _ in range(length))
        follow_ups = tuple(
            tuple(rng.randrange(shape.vocab) for _ in range(shape.user_tokens))
            for _ in range(shape.turns - 1)
        )
        groups.append(Group(index, template + problem, follow_ups))
    return groups


def next_prompt(prompt: list[int], answer: list[int], follow_up: tuple[int, ...]) -> list[int]:
    """The next turn's prompt: the whole conversation so far, as multi-turn TRL re-sends it."""
    return [*prompt, *answer, *follow_up]
