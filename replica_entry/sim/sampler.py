"""Deterministic generation: the tokens and log-probabilities a simulated model "samples".

A sequence is drawn from ``random.Random`` seeded with xxh3-64 of (seed, model, prompt tokens,
choice index); the model is the adapter name or the base model, so every adapter answers
differently. Greedy requests (temperature 0) leave the choice index out, so their ``n`` choices
agree, as vLLM's do. Each step draws a token id in ``[0, vocab_size)`` and its log-probability
in ``(-10, 0]``; the ``k`` alternatives reported as top log-probabilities are the next ids
``token+1 .. token+k`` with lower log-probabilities, except the first step of a request for top
log-probabilities, which is the policy's own (``sim.policy.next_top``: what the proxy's
served-policy probe reads). Cost: O(max_tokens * (1 + k)).
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash


@dataclass(frozen=True, slots=True)
class Sampled:
    """One generated sequence; ``top`` holds the alternatives of each step (sampled first)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]


def sequence_seed(seed: int, model: str, prompt: Sequence[int], choice: int | None) -> int:
    """The RNG seed of one choice: stable across processes and Python versions."""
    hasher = xxhash.xxh3_64(f"{seed}|{model}|{choice}|".encode())
    hasher.update(array("q", prompt).tobytes())
    return int(hasher.intdigest())


def sample(
    rng_seed: int,
    max_tokens: int,
    vocab_size: int,
    top_k: int,
    first: tuple[tuple[int, float], ...] = (),
) -> Sampled:
    """Draw ``max_tokens`` tokens; ``top_k`` alternatives per step besides the sampled one.
    ``first``: the first step's likeliest tokens under the policy (``sim.policy.next_top``),
    likeliest first: that step samples the first of them and reports them as its top."""
    rng = random.Random(rng_seed)
    top_k = min(top_k, vocab_size - 1)  # alternatives must be distinct ids
    token_ids: list[int] = []
    logprobs: list[float] = []
    top: list[tuple[tuple[int, float], ...]] = []
    if first and max_tokens > 0:
        token_ids.append(first[0][0])
        logprobs.append(first[0][1])
        top.append(first)
    for _ in range(max_tokens - len(token_ids)):
        token = rng.randrange(vocab_size)
        logprob = -round(rng.random() * 10.0, 6)
        token_ids.append(token)
        logprobs.append(logprob)
        alternatives = [((token + j) % vocab_size, logprob - j) for j in range(1, top_k + 1)]
        top.append(((token, logprob), *alternatives))
    return Sampled(tuple(token_ids), tuple(logprobs), tuple(top))
