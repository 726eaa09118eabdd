"""The task ``python -m benchmarks learn`` trains: write lines of words and numbers, rewarded for
the share of digits.

Why this task: a tiny model (``trainer_entry.tiny_model``: 2 layers, hidden 64) trains on these
CPUs in minutes, and a random-weight one gave GRPO no signal (its completions are noise: all
score alike, REFERENCE's issue 39 run stayed flat). So the model first learns, by a short
supervised warm-up (``warm``), to answer every prompt with a line of words and numbers whose
digit share varies from line to line (each line draws its own share); GRPO then has what it needs:
completions of one prompt that score differently, and one direction to move (more numbers,
fewer words), which a LoRA can take. The reward is the share of digit characters among the
non-space characters of the completion (an empty one scores 0).

Pure and deterministic from a seed: the corpus, the prompts and the reward import nothing heavy
(the reward runs in TRL's rollout worker as ``benchmarks.learn.task:digit_share``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

WORDS = (
    *("what", "is", "the", "sum", "of", "and", "plus", "minus", "times", "answer", "number"),
    *("compute", "please", "think", "step", "by", "first", "then", "so", "we", "get", "result"),
)  # the tiny tokenizer's own words (``trainer_entry.tiny_model.WORDS``): few tokens each
ITEMS = (4, 9)  # words or numbers per line
PROMPTS = 64


def prompt(i: int) -> str:
    return f"Write line {i} of words and numbers."


def line(rng: random.Random) -> str:
    """One reply: ``ITEMS`` words or numbers, each a number with this line's own chance."""
    share = rng.random()
    items = rng.randrange(*ITEMS)
    return " ".join(
        str(rng.randrange(100)) if rng.random() < share else rng.choice(WORDS) for _ in range(items)
    )


def conversations(seed: int, count: int) -> Iterator[list[dict[str, str]]]:
    """The warm-up corpus: a prompt and one reply line, ``count`` times."""
    rng = random.Random(seed)
    for _ in range(count):
        yield [
            {"role": "user", "content": prompt(rng.randrange(PROMPTS))},
            {"role": "assistant", "content": line(rng)},
        ]


def dataset_rows() -> list[dict[str, Any]]:
    """GRPO's prompts (``--dataset`` as JSON lines): every prompt the warm-up saw."""
    return [{"prompt": prompt(i)} for i in range(PROMPTS)]


def digit_share(completions: Sequence[Any], **_: Any) -> list[float]:
    """The reward: the share of digit characters among the non-space characters."""
    from trainer_entry.rewards import completion_text

    scores = []
    for completion in completions:
        text = "".join(completion_text(completion).split())
        scores.append(sum(ch.isdigit() for ch in text) / len(text) if text else 0.0)
    return scores
