"""Routing keys: groups and conversations share a key, problems do not, templates are learned."""

from __future__ import annotations

import copy
import json
import random
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.routing.keys import KEY_WINDOW, KEYED_PROMPTS, KeyBuilder, KeySettings, _common_prefix
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


def test_a_batch_is_keyed_by_its_first_prompts_and_a_key_reads_a_bounded_window() -> None:
    """SECURITY.md's bounds: the first 32 prompts of a batch, at most 64 KiB of a prompt."""
    builder = KeyBuilder()
    rng = random.Random(5)
    batch = [problem(rng) for _ in range(KEYED_PROMPTS + 8)]
    assert len(key_of(builder, batch)) == KEYED_PROMPTS
    shared = "x" * (KEY_WINDOW + 10)
    assert key_of(builder, shared + "one ending") == key_of(builder, shared + "another ending")


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


# -- stability: a key depends on the prompt and the confirmed templates, never on the traffic order


def shared_prefix_groups(
    rng: random.Random, groups: int, template: list[int], size: int = 8
) -> list[list[list[int]]]:
    """Each group: one long prefix (template + 300 tokens), ``size`` different 40-token suffixes."""
    out = []
    for _ in range(groups):
        prefix = template + problem(rng, 300)
        out.append([prefix + problem(rng, 40) for _ in range(size)])
    return out


def test_shared_prefix_groups_keep_one_key_each_without_a_template() -> None:
    # Sent one group after another, the recent prompts are the group's own: their common prefix
    # is the group's long prefix, which must never decide the key (it split groups before).
    builder = KeyBuilder()
    groups = shared_prefix_groups(random.Random(21), 12, template=[])
    keys = [{key_of(builder, prompt) for prompt in group} for group in groups]
    assert all(len(group_keys) == 1 for group_keys in keys)
    assert len(set().union(*keys)) == len(groups)


def test_shared_prefix_groups_keep_one_key_each_under_a_template() -> None:
    builder = KeyBuilder()
    warm(builder, TEMPLATE)
    groups = shared_prefix_groups(random.Random(22), 12, template=TEMPLATE)
    keys = [{key_of(builder, prompt) for prompt in group} for group in groups]
    assert all(len(group_keys) == 1 for group_keys in keys)
    assert len(set().union(*keys)) == len(groups)


def conversation(rng: random.Random, start: list[int], turns: int) -> list[list[int]]:
    """One rollout's prompts, turn by turn (each re-sends the conversation so far)."""
    prompts = [start]
    for _ in range(turns - 1):
        prompts.append(prompts[-1] + problem(rng, 48) + problem(rng, 12))
    return prompts


def test_multi_turn_rollouts_keep_their_key_in_any_order_without_a_template() -> None:
    rng = random.Random(23)
    rollouts = [conversation(rng, first, 3) for first in [problem(rng, 120)] * 8]
    grouped = [prompt for rollout in rollouts for prompt in rollout]  # one rollout after another
    by_turn = [rollout[t] for t in range(3) for rollout in rollouts]  # turn 1 of all, then 2, 3
    for order in (grouped, by_turn):
        builder = KeyBuilder()
        assert len({key_of(builder, prompt) for prompt in order}) == 1


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.booleans())
def test_any_preceding_traffic_leaves_a_key_unchanged(seed: int, templated: bool) -> None:
    """Keys are a function of the prompt and the confirmed templates: shuffle shared-prefix
    groups, GRPO groups and multi-turn rollouts in any order, and every prompt's key is the one
    a builder that saw none of that traffic (only the same template warm-up) gives it."""
    rng = random.Random(seed)
    template = TEMPLATE if templated else []
    traffic: list[list[int]] = []
    for group in shared_prefix_groups(rng, 3, template, size=6):
        traffic += group
    for _ in range(3):
        traffic += [template + problem(rng, 100)] * 4
    for first in [template + problem(rng, 90)] * 2:
        traffic += conversation(rng, first, 3)
    rng.shuffle(traffic)

    warmed = KeyBuilder()
    if templated:
        warm(warmed, TEMPLATE, seed=5)
    seen = copy.deepcopy(warmed)
    got = [key_of(seen, prompt) for prompt in traffic]
    assert seen.templates == warmed.templates  # this traffic confirms nothing new
    assert got == [key_of(copy.deepcopy(warmed), prompt) for prompt in traffic]


def test_a_prefix_followed_by_at_most_threshold_blocks_is_never_a_template() -> None:
    # 16 different suffixes behind one long prefix (a group of 16): still one key; a 17th
    # different follower makes the prefix a template, and new suffixes then key apart.
    builder = KeyBuilder(KeySettings(threshold=16))
    rng = random.Random(24)
    (group,) = shared_prefix_groups(rng, 1, template=[], size=16)
    assert len({key_of(builder, prompt) for prompt in group}) == 1
    assert builder.templates == 0
    prefix = group[0][:-40]
    key_of(builder, prefix + problem(rng, 40))
    assert builder.templates == 1
    assert key_of(builder, prefix + problem(rng, 40)) != key_of(builder, prefix + problem(rng, 40))


def hint_of(builder: KeyBuilder, prompt: object) -> tuple[tuple[int, ...], int | None]:
    return builder.keyed(peek_generation(body(prompt), b"prompt"), "trl-policy-v3")


def test_a_hint_during_the_warm_up_is_the_key_once_the_template_is_confirmed() -> None:
    # Before the template is confirmed every prompt behind it shares one key; each prompt's
    # hint (its prefix shared with another group's prompt plus its next block) already tells
    # the groups apart, stays the same for the group's later turns, and is the key the prompt
    # gets once the template is confirmed: what the policy remembered under it still applies.
    builder = KeyBuilder()
    rng = random.Random(31)
    first, second = TEMPLATE + problem(rng), TEMPLATE + problem(rng)
    hint_of(builder, first)
    (shared,), hint = hint_of(builder, second)
    (turn1_key,), turn1_hint = hint_of(builder, first)
    turn2 = first + problem(rng, 40) + problem(rng, 10)
    hint_of(builder, second + problem(rng, 40))
    (turn2_key,), turn2_hint = hint_of(builder, turn2)
    assert builder.templates == 0
    assert turn1_key == turn2_key == shared  # the key: a function of the prompt only
    assert hint is not None and turn1_hint is not None and hint != turn1_hint
    assert turn2_hint == turn1_hint
    warm(builder, TEMPLATE)
    assert builder.templates == 1
    assert hint_of(builder, first) == ((turn1_hint,), None)
    assert hint_of(builder, turn2) == ((turn1_hint,), None)


def test_a_batch_has_no_hint() -> None:
    builder = KeyBuilder()
    rng = random.Random(32)
    hint_of(builder, TEMPLATE + problem(rng))
    keys, hint = hint_of(builder, [TEMPLATE + problem(rng) for _ in range(2)])
    assert len(keys) == 2
    assert hint is None
