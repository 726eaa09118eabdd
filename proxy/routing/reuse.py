"""How much prefix reuse the traffic offered: the share of prompt tokens whose prefix the fleet
had already seen, whichever replica saw it (the best any routing could turn into cache hits).

Realized reuse is what the replicas report (``usage.prompt_tokens_details.cached_tokens``);
this estimate is what was *available*, so ``realized / available`` (affinity efficiency) says how
much of it routing captured, as one number.

Algorithm: a prompt is cut into ``CHUNK``-byte chunks of its raw JSON text, chain-hashed with
xxh64, each chunk's hash seeded with the one before (seeded first by the model name: vLLM's
prefix cache is per adapter); its leading chunks whose chain hash is
in the table were available, the rest are added; a prompt seen whole before (its full hash in
the table: a GRPO group's later rollouts) counts its tail too. The table keeps at most
``capacity`` hashes (oldest dropped first). Cost is bounded by sampling whole conversations:
only prompts whose routing key falls in 1 of ``SAMPLE`` buckets are hashed (their group's
rollouts and later turns included, so what they share is seen), at most ``MAX_BYTES`` of each;
about 0.3 us per chunk, so
~1 us per request on average for TRL-sized prompts. Granularity: one chunk (~60 tokens) per
prompt that extends another, counted as not available: the estimate errs low. Pure: no I/O,
no clock.
"""

from __future__ import annotations

import xxhash

CHUNK = 256
SAMPLE = 16
MAX_BYTES = 1 << 20
DEFAULT_CAPACITY = 1 << 18  # chain hashes (~80 bytes each: ~20 MB at most)


class ReuseEstimator:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._seen: dict[int, None] = {}

    @property
    def size(self) -> int:
        return len(self._seen)

    def sampled(self, key: int) -> bool:
        return key % SAMPLE == 0

    def observe(self, buf: bytes, lo: int, hi: int, seed: int) -> tuple[int, int]:
        """(prompt bytes, available bytes) of the prompt ``buf[lo:hi]``, recording it."""
        hi = min(hi, lo + MAX_BYTES)
        digest, available, matching = seed, 0, True
        hash_chunk, seen_before = xxhash.xxh64_intdigest, self._seen_before
        for start in range(lo, hi - CHUNK + 1, CHUNK):
            digest = hash_chunk(buf[start : start + CHUNK], digest)  # chained: the prefix's hash
            if seen_before(digest) and matching:
                available += CHUNK
            else:
                matching = False
        tail = (hi - lo) % CHUNK
        if tail:
            digest = hash_chunk(buf[hi - tail : hi], digest)
            if seen_before(digest) and matching:
                available += tail  # the same prompt whole, seen before
        return hi - lo, available

    def _seen_before(self, digest: int) -> bool:
        """Whether ``digest`` was in the table; it is in it from now on."""
        seen = self._seen
        if digest in seen:
            return True
        seen[digest] = None
        if len(seen) > self.capacity:
            del seen[next(iter(seen))]
        return False
