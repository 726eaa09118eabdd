"""Which policy a simulated replica samples under a model name, and its teacher-forced logprobs.

A policy is named by its content: ``BASE`` for the base model, else the sha256 of an adapter's
files (its config and weights, as the replica read them when it loaded them; a trainer's probe
reference beside them is not part of the policy). ``prompt_logprobs(policy, ids)`` is a
deterministic function of the policy and the tokens: two replicas serving the same content
answer alike to the last bit, different content differently, as two real replicas of one
model do in float32 on one machine. An honest replica answers an adapter's name with that
adapter's policy; ``Faults.policy`` makes one answer with the base model's (``base``), or the
adapter it loaded before this one (``previous``), under the new name: a load acknowledged, a
policy not served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

BASE = "base"
POLICY_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
LOWEST = -12.0  # logprobs fall in (LOWEST, 0)
VOCAB_RANKS = 1000


def content_policy(directory: Path) -> str:
    """The policy an adapter directory holds: the sha256 of its config and weights. Blocking."""
    hasher = hashlib.sha256()
    for name in POLICY_FILES:
        path = directory / name
        if path.is_file():
            hasher.update(name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def prompt_logprobs(policy: str, ids: Sequence[int]) -> list[float | None]:
    """Each token's logprob given the ones before it (None for the first: vLLM's shape)."""
    out: list[float | None] = [None]
    for i in range(1, len(ids)):
        key = f"{policy}:{i}:{ids[i - 1]}:{ids[i]}".encode()
        unit = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
        out.append(LOWEST * (1.0 - unit) * 0.999 - 0.001)
    return out


def rank(logprob: float) -> int:
    """A plausible vocabulary rank for a logprob (1: the likeliest)."""
    return 1 + int((logprob / LOWEST) * (VOCAB_RANKS - 1))
