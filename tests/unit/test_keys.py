"""Routing keys: groups and conversations share a key, problems do not, templates are learned."""

from __future__ import annotations

import json
import random
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.routing.keys import KeyBuilder, KeySettings, _common_prefix
from proxy.routing.peek import Peek, peek_generation

RNG = random.Random(7)
TEMPLATE = [RNG.randrange(150_000) for _ in range(96)]


def body(prompt: object, model: str = "trl-policy-v3", spaced: bool = True) -> bytes:
    doc = {"model": model, "prompt": prompt, "max_tokens": 8, "n": 1}
    return json.dumps(doc).encode() if spaced else json.dumps(doc, separators=(",", ":")).encode()


def key_of(builder: KeyBuilder, prompt: object, model: str = "trl-policy-v3") -> tuple[int, ...]:
    return builder.keys(peek_generation(body(prompt, model), b"prompt"), model)


def problem(rng: random.Random, n: int = 80) -> list[int]:
    return [rng.randrange(150_000) for _ in range(n)]


def warm(builder: KeyBuilder, template: list[int], groups: int = 40, seed: int = 1) -> None:
    rng = random.Random(seed)
    for _ in range(groups):
        key_of(builder, template + problem(rng))


def test_same_prompt_same_key() -> None:
    builder = KeyBuilder()
    prompt = TEMPLATE + problem(random.Random(1))
    assert key_of(builder, prompt) == key_of(builder, list(prompt))


def test_template_is_learned_and_groups_and_turns_share_a_key() -> None:
    builder = KeyBuilder()
    warm(builder, TEMPLATE)
    assert builder.templates == 1
    rng = random.Random(99)
    prompt = TEMPLATE + problem(rng)
    group_key = key_of(builder, prompt)
    # G rollouts of the group: the same prompt.
    assert all(key_of(builder, prompt) == group_key for _ in range(8))
    # Later turns of each rollout extend the conversation with different answers.
    for _ in range(8):
        turn2 = prompt + problem(rng, 40) + problem(rng, 10)
        turn3 = turn2 + problem(rng, 40) + problem(rng, 10)
        assert key_of(builder, turn2) == group_key
        assert key_of(builder, turn3) == group_key
    # Another problem behind the same template has another key.
    assert key_of(builder, TEMPLATE + problem(rng)) != group_key


def test_long_shared_system_prompt_does_not_collapse_keys() -> None:
    builder = KeyBuilder()
    system = [RNG.randrange(150_000) for _ in range(2000)]
    warm(builder, system)
    rng = random.Random(5)
    distinct = {key_of(builder, system + problem(rng)) for _ in range(200)}
    assert len(distinct) == 200


def test_versions_of_one_adapter_share_keys_other_families_do_not() -> None:
    builder = KeyBuilder()
    prompt = TEMPLATE + problem(random.Random(3))
    v3 = key_of(builder, prompt, "trl-policy-v3")
    assert key_of(builder, prompt, "trl-policy-v4") == v3
    assert key_of(builder, prompt, "other-policy-v3") != v3


def test_multi_turn_problem_end_stays_specific() -> None:
    # A problem's last block followed by G (< threshold) different answers is not template.
    builder = KeyBuilder(KeySettings(threshold=16))
    warm(builder, TEMPLATE)
    rng = random.Random(11)
    prompt = TEMPLATE + problem(rng)
    base = key_of(builder, prompt)
    for _ in range(8):
        key_of(builder, prompt + problem(rng, 40))
    assert key_of(builder, prompt + problem(rng, 40)) == base
    assert builder.templates == 1


def test_text_and_chat_prompts_are_keyed() -> None:
    builder = KeyBuilder()
    system = "You are a careful mathematician. " * 20
    for i in range(40):
        key_of(builder, system + f"Problem {i}: compute {i} * {i + 1}.")
    a = key_of(builder, system + "Problem 1000: what is 2 + 2?")
    b = key_of(builder, system + "Problem 1001: what is 3 + 3?")
    assert a != b
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    peek = peek_generation(json.dumps(chat).encode(), b"messages")
    assert len(builder.keys(peek, "m")) == 1


def test_batched_prompts_get_one_key_each() -> None:
    builder = KeyBuilder()
    warm(builder, TEMPLATE)
    rng = random.Random(2)
    batch = [TEMPLATE + problem(rng) for _ in range(3)]
    keys = key_of(builder, batch)
    assert len(keys) == 3
    assert keys == tuple(key_of(builder, p)[0] for p in batch)


def test_memory_is_bounded_after_a_million_distinct_prompts() -> None:
    builder = KeyBuilder(KeySettings(max_tracked=1024))
    head = b'{"model": "m", "prompt": [' + b", ".join(b"%d" % t for t in TEMPLATE[:32]) + b", "
    tail = b", 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]}"
    start = head.index(b"[")

    def one(i: int) -> None:
        raw = head + b"%d" % i + tail
        builder.keys(Peek("m", False, "tokens", raw, start, len(raw) - 1), "m")

    for i in range(900_000):
        one(i)
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    for i in range(900_000, 1_000_000):
        one(i)
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert builder.tracked <= 1024
    assert builder.templates <= 8
    assert after - before < 256 * 1024  # flat: the last 100k prompts added nothing lasting


@settings(max_examples=50)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_common_prefix(a: bytes, b: bytes) -> None:
    n = _common_prefix(a, b, first=8)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


@settings(max_examples=50)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=300), st.booleans())
def test_key_independent_of_other_fields_and_stable(prompt: list[int], spaced: bool) -> None:
    builder = KeyBuilder()
    first = builder.keys(peek_generation(body(prompt, spaced=spaced), b"prompt"), "m")
    doc = {"n": 4, "prompt": prompt, "temperature": 0.7, "model": "m"}
    raw = json.dumps(doc, separators=(", ", ": ") if spaced else (",", ":")).encode()
    again = builder.keys(peek_generation(raw, b"prompt"), "m")
    assert first == again
