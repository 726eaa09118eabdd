"""The replica's prefix cache, modelled on vLLM v1's block-hash cache. Pure: no I/O, no clock.

Algorithm: a prompt is cut into whole blocks of ``block_size`` tokens (a partial tail block is
never cached). Block ``i``'s hash is xxh3-64 of its token ids seeded with block ``i-1``'s hash;
block 0 is seeded with a root hash of the LoRA name, so the same tokens under different
adapters never share KV (vLLM puts the LoRA name into the block hash's extra keys; see vLLM
issue #42125 for what reusing a name does). The cache is one LRU of block hashes with room for
``capacity`` blocks, shared by all adapters. A request's blocks are touched tail first, so the
head of a chain is the most recently used: eviction takes tails before the prefixes they hang
off, as vLLM's free-block queue does (it frees a request's blocks in reverse order).

A request's hit is the number of leading blocks already cached, times ``block_size``. As in
vLLM, a fully cached prompt still recomputes its last token to get logits, so at most
``(len - 1) // block_size`` blocks can hit: a 32-token prompt at block 16 repeated hits 16.

Cost: O(len / block_size) hashes and O(1) per LRU step. Invariant: ``len(self) <= capacity``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

import xxhash

_BASE_ROOT = 0


def root_hash(lora: str | None) -> int:
    """The seed of a prompt's hash chain: one per adapter, ``0`` for the base model."""
    return _BASE_ROOT if lora is None else int(xxhash.xxh3_64_intdigest(lora.encode()))


def chain_hashes(root: int, tokens: Sequence[int], block_size: int) -> list[int]:
    """Hashes of the whole blocks of ``tokens``, each seeded with its predecessor's."""
    packed = array("q", tokens).tobytes()
    width = block_size * 8  # bytes per block: int64 token ids
    hashes: list[int] = []
    parent = root
    for start in range(0, (len(tokens) // block_size) * width, width):
        parent = int(xxhash.xxh3_64_intdigest(packed[start : start + width], seed=parent))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """An LRU of chained block hashes with room for ``capacity`` blocks (0 turns caching off)."""

    def __init__(self, block_size: int, capacity: int) -> None:
        if block_size < 1 or capacity < 0:
            raise ValueError("block_size must be >= 1 and capacity >= 0")
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def query(self, lora: str | None, tokens: Sequence[int]) -> int:
        """Serve a prompt: return its cached tokens, then cache all its whole blocks.

        The hit is counted before insertion, so a first request hits 0 and an identical second
        one hits ``((len - 1) // block_size) * block_size``.
        """
        hashes = chain_hashes(root_hash(lora), tokens, self.block_size)
        hittable = (len(tokens) - 1) // self.block_size if tokens else 0
        hits = self._leading_hits(hashes[:hittable])
        self._insert(hashes)
        return hits * self.block_size

    def insert(self, lora: str | None, tokens: Sequence[int]) -> None:
        """Cache the whole blocks of ``tokens`` (a prompt with the tokens generated after it)."""
        self._insert(chain_hashes(root_hash(lora), tokens, self.block_size))

    def clear(self) -> None:
        self._blocks.clear()

    def _leading_hits(self, hashes: Sequence[int]) -> int:
        hits = 0
        for block_hash in hashes:
            if block_hash not in self._blocks:
                break
            self._blocks.move_to_end(block_hash)
            hits += 1
        return hits

    def _insert(self, hashes: Sequence[int]) -> None:
        if self.capacity == 0:
            return
        for block_hash in reversed(hashes):
            if block_hash in self._blocks:
                self._blocks.move_to_end(block_hash)
            else:
                self._blocks[block_hash] = None
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
