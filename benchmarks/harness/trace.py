"""GRPO-shaped traffic: P prompts sharing a chat template, G rollouts each, optional turns.

A trace is data, not I/O: ``Group`` objects list each rollout's first prompt. Later turns extend
the conversation (previous prompt + the model's answer + the next user message), so the replay
needs the answer of turn k to build turn k+1; ``next_prompt`` does that.

Shapes: GRPO (a group's G rollouts send one prompt); shared-prefix (``suffix_tokens`` > 0: each
rollout's prompt is the group's long prefix plus its own suffix, as agentic tool outputs,
few-shot variants or a prefix-repetition benchmark send); ``template_tokens`` 0 for traffic with
no template at all. ``rollout_order`` gives the order rollouts start in: group after group
(``interleave`` 1), or round-robin over windows of ``interleave`` groups.
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
    suffix_tokens: int = 0  # > 0: each rollout's prompt ends in its own suffix (shared-prefix)
    interleave: int = 1  # rollouts start round-robin over this many groups at a time
    template_seed: int | None = None  # the template's own seed (one run's template, many traces)


@dataclass(frozen=True, slots=True)
class Group:
    index: int
    prompt: tuple[int, ...]  # template + problem: what every rollout's first prompt starts with
    follow_ups: tuple[tuple[int, ...], ...]  # the user message of each later turn
    suffixes: tuple[tuple[int, ...], ...] = ()  # per rollout, after ``prompt`` (shared-prefix)

    def first_prompt(self, rollout: int) -> list[int]:
        """Rollout ``rollout``'s first-turn prompt."""
        suffix = self.suffixes[rollout] if self.suffixes else ()
        return [*self.prompt, *suffix]


def build_groups(shape: TraceShape) -> list[Group]:
    """The trace's groups, deterministic from ``shape.seed``."""
    rng = random.Random(shape.seed)
    template_rng = rng if shape.template_seed is None else random.Random(shape.template_seed)
    template = tuple(template_rng.randrange(shape.vocab) for _ in range(shape.template_tokens))
    groups = []
    for index in range(shape.prompts):
        length = rng.randint(*shape.problem_tokens)
        problem = tuple(rng.randrange(shape.vocab) for _ in range(length))
        follow_ups = tuple(
            tuple(rng.randrange(shape.vocab) for _ in range(shape.user_tokens))
            for _ in range(shape.turns - 1)
        )
        suffixes = tuple(
            tuple(rng.randrange(shape.vocab) for _ in range(shape.suffix_tokens))
            for _ in range(shape.group_size if shape.suffix_tokens else 0)
        )
        groups.append(Group(index, template + problem, follow_ups, suffixes))
    return groups


def rollout_order(groups: list[Group], shape: TraceShape) -> list[tuple[Group, int]]:
    """(group, rollout index) in the order rollouts start."""
    window = max(shape.interleave, 1)
    order = []
    for start in range(0, len(groups), window):
        chunk = groups[start : start + window]
        order += [(group, i) for i in range(shape.group_size) for group in chunk]
    return order


def next_prompt(prompt: list[int], answer: list[int], follow_up: tuple[int, ...]) -> list[int]:
    """The next turn's prompt: the whole conversation so far, as multi-turn TRL re-sends it."""
    return [*prompt, *answer, *follow_up]
