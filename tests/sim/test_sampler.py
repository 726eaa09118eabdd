"""Deterministic generation and the simulated tokenizer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replica_entry.sim.sampler import sample, sequence_seed
from replica_entry.sim.tokenizer import decode, encode_text, piece, render_chat

prompts = st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=40)


@given(prompts, st.integers(), st.integers(min_value=0, max_value=7))
def test_the_same_inputs_give_the_same_tokens(prompt: list[int], seed: int, choice: int) -> None:
    first = sample(sequence_seed(seed, "m", prompt, choice), 12, 1000, 2)
    second = sample(sequence_seed(seed, "m", prompt, choice), 12, 1000, 2)
    assert first == second


def test_seed_model_prompt_and_choice_each_change_the_tokens() -> None:
    def tokens(seed: int, model: str, prompt: list[int], choice: int | None) -> tuple[int, ...]:
        return sample(sequence_seed(seed, model, prompt, choice), 16, 1000, 0).token_ids

    base = tokens(0, "m", [1, 2, 3], 0)
    assert tokens(1, "m", [1, 2, 3], 0) != base
    assert tokens(0, "trl-policy-v1", [1, 2, 3], 0) != base
    assert tokens(0, "m", [1, 2, 4], 0) != base
    assert tokens(0, "m", [1, 2, 3], 1) != base
    assert tokens(0, "m", [1, 2, 3], None) == tokens(0, "m", [1, 2, 3], None)


@given(
    st.integers(), st.integers(min_value=0, max_value=64), st.integers(min_value=2, max_value=50)
)
def test_samples_are_in_the_vocabulary_with_logprobs_at_most_zero(
    rng_seed: int, length: int, vocab: int
) -> None:
    top_k = 5
    sampled = sample(rng_seed, length, vocab, top_k)
    assert len(sampled.token_ids) == len(sampled.logprobs) == len(sampled.top) == length
    for token, logprob, top in zip(sampled.token_ids, sampled.logprobs, sampled.top, strict=True):
        assert 0 <= token < vocab
        assert -10.0 <= logprob <= 0.0
        assert top[0] == (token, logprob)
        ids = [t for t, _ in top]
        assert len(set(ids)) == len(ids) == min(top_k, vocab - 1) + 1


@given(st.text(), st.text())
def test_text_tokenization_preserves_prefixes(head: str, tail: str) -> None:
    assert encode_text(head + tail, 1000)[: len(head.encode())] == encode_text(head, 1000)


def test_a_small_vocabulary_folds_bytes() -> None:
    assert encode_text("a", 10) == [ord("a") % 10]


def test_a_continued_conversation_renders_to_an_extension() -> None:
    turn = [("system", "be brief"), ("user", "hi")]
    later = [*turn, ("assistant", "hello"), ("user", "bye")]
    assert render_chat(later, True).startswith(render_chat(turn, False))


def test_generated_text_is_the_join_of_pieces() -> None:
    assert decode([1, 22]) == piece(1) + piece(22) == " t1 t22"
