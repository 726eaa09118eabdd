"""The prefix-cache model: whole blocks, chained hashes, LRU, keyed by adapter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replica_entry.sim.prefix_cache import PrefixCache, chain_hashes, root_hash

BLOCK = 4
tokens = st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=60)


def test_a_first_prompt_misses_and_a_repeat_hits_its_whole_blocks() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    prompt = list(range(10))  # two whole blocks and a partial one
    assert cache.query(None, prompt) == 0
    assert cache.query(None, prompt) == 8
    assert len(cache) == 2


def test_the_last_token_is_always_recomputed() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    prompt = list(range(8))  # exactly two blocks
    cache.query(None, prompt)
    assert cache.query(None, prompt) == 4


def test_a_partial_tail_block_is_never_cached() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    cache.query(None, list(range(7)))
    assert cache.query(None, [*range(7), 99, 100]) == 4


def test_a_prompt_sharing_a_prefix_hits_up_to_the_first_difference() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    cache.query(None, list(range(16)))
    assert cache.query(None, [*range(9), 77, *range(10, 16)]) == 8


def test_adapters_never_share_blocks() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    prompt = list(range(12))
    cache.query("trl-policy-v1", prompt)
    assert cache.query("trl-policy-v2", prompt) == 0
    assert cache.query(None, prompt) == 0
    assert cache.query("trl-policy-v1", prompt) == 8


def test_the_least_recently_used_prompt_is_evicted_at_capacity() -> None:
    cache = PrefixCache(BLOCK, capacity=4)
    a, b, c = ([k] * 9 for k in (1, 2, 3))  # two whole blocks each
    cache.query(None, a)
    cache.query(None, b)
    cache.query(None, a)  # a is now more recent than b
    cache.query(None, c)  # evicts b
    assert len(cache) == 4
    assert cache.query(None, b) == 0
    assert cache.query(None, c) == 8


def test_eviction_takes_a_chain_tail_before_its_head() -> None:
    cache = PrefixCache(BLOCK, capacity=3)
    cache.query(None, list(range(13)))  # three blocks: head, middle, tail
    cache.query(None, [100] * 5)  # one more block: one of the three must go
    assert cache.query(None, list(range(13))) == 8  # head and middle survived


def test_zero_capacity_caches_nothing() -> None:
    cache = PrefixCache(BLOCK, capacity=0)
    cache.query(None, list(range(20)))
    assert cache.query(None, list(range(20))) == 0
    assert len(cache) == 0


def test_insert_caches_generated_continuations() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    prompt = list(range(6))
    cache.query(None, prompt)
    cache.insert(None, [*prompt, 40, 41, 42])
    assert cache.query(None, [*prompt, 40, 41, 42, 43, 44]) == 8


def test_clear_empties_the_cache() -> None:
    cache = PrefixCache(BLOCK, capacity=100)
    cache.query(None, list(range(20)))
    cache.clear()
    assert cache.query(None, list(range(20))) == 0


def test_invalid_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="block_size"):
        PrefixCache(0, capacity=10)


@given(tokens, st.integers(min_value=1, max_value=8), st.integers(min_value=0, max_value=40))
def test_hits_are_whole_blocks_below_the_prompt_length(
    prompt: list[int], block: int, capacity: int
) -> None:
    cache = PrefixCache(block, capacity)
    for _ in range(2):
        hit = cache.query(None, prompt)
        assert hit % block == 0
        assert 0 <= hit <= len(prompt) - 1
        assert len(cache) <= capacity


@given(tokens, st.integers(min_value=1, max_value=8))
def test_a_repeat_hits_every_block_but_the_one_holding_the_last_token(
    prompt: list[int], block: int
) -> None:
    cache = PrefixCache(block, capacity=1_000)
    cache.query(None, prompt)
    assert cache.query(None, prompt) == (len(prompt) - 1) // block * block


@given(st.lists(st.tuples(st.sampled_from([None, "a", "b"]), tokens), max_size=30))
def test_capacity_is_never_exceeded(requests: list[tuple[str | None, list[int]]]) -> None:
    cache = PrefixCache(BLOCK, capacity=10)
    for lora, prompt in requests:
        cache.query(lora, prompt)
        assert len(cache) <= 10


@given(tokens, tokens)
def test_hashes_of_a_prefix_are_a_prefix_of_the_hashes(head: list[int], tail: list[int]) -> None:
    root = root_hash("x")
    assert chain_hashes(root, head + tail, BLOCK)[: len(head) // BLOCK] == chain_hashes(
        root, head, BLOCK
    )
