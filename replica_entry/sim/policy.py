"""Which policy a simulated replica samples under a model name, and the logprobs it answers with.

A policy is named by its content: ``BASE`` for the base model, else the sha256 of an adapter's
files (its config and weights, as the replica read them when it loaded them; a trainer's probe
reference beside them is not part of the policy). ``next_top(policy, prompt, k, vocab)`` (the
first generated token's top logprobs, what the proxy's served-policy probe reads) is a
deterministic function of the policy and the tokens: two replicas serving the same content
answer alike to the last bit, different content differently, as two real replicas of one
model do in float32 on one machine. An honest replica answers an adapter's name with that
adapter's policy; ``Faults.policy`` makes one answer with the base model's (``base``), or the
adapter it loaded before this one (``previous``), under the new name: a load acknowledged, a
policy not served.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from pathlib import Path

BASE = "base"
POLICY_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
LOWEST = -12.0  # logprobs fall in (LOWEST, 0)


def content_policy(directory: Path) -> str:
    """The policy an adapter directory holds: the sha256 of its config and weights. Blocking."""
    hasher = hashlib.sha256()
    for name in POLICY_FILES:
        path = directory / name
        if path.is_file():
            hasher.update(name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def next_top(
    policy: str, prompt: Sequence[int], k: int, vocab_size: int
) -> tuple[tuple[int, float], ...]:
    """The ``k`` likeliest next tokens after ``prompt`` under ``policy`` and their logprobs,
    likeliest first: a deterministic function of the two (distinct token ids, logprobs in
    ``(LOWEST, 0)``)."""
    key = policy.encode() + b":" + b",".join(str(t).encode() for t in prompt)
    rng = random.Random(hashlib.blake2b(key, digest_size=16).digest())
    tokens = rng.sample(range(vocab_size), min(k, vocab_size))
    logprobs = sorted((LOWEST * rng.random() for _ in tokens), reverse=True)
    return tuple(zip(tokens, logprobs, strict=True))
