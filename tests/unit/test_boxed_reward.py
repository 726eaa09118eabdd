"""The published run's grader (``trainer_entry.boxed``): last box, LaTeX normalisation, numbers,
a symbolic fallback when math_verify is installed, and 0 for a rollout that never ended."""

from __future__ import annotations

import pickle
from importlib.util import find_spec

import pytest

from trainer_entry.boxed import BoxedReward, gold_answer, last_boxed, normalise, same_answer

END = 7  # an end-of-sequence id for these cases
ENDED, CLIPPED = [3, 4, END], [3, 4, 5]


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("so \\boxed{3} wait, no: \\boxed{4}", "4"),  # the LAST box, not TRL's first
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces kept whole
        ("draft \\boxed{5} then \\boxed{unclosed", "5"),  # an unclosed last box: the one before
        ("no box at all: 12", None),
        ("\\boxed{}", ""),
    ],
)
def test_the_last_balanced_box_is_the_answer(text: str, boxed: str | None) -> None:
    assert last_boxed(text) == boxed


@pytest.mark.parametrize(
    ("got", "gold"),
    [
        ("\\dfrac{1}{2}", "\\frac12"),
        ("$x = 5$", "5"),
        ("1,000", "1000"),
        ("90^\\circ", "90"),
        ("50\\%", "50"),
        ("\\text{(A)}", "(A)"),
        ("0.5", "\\frac{1}{2}"),
        ("6/4", "1.5"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("-3.", "-3"),
    ],
)
def test_normalised_answers_agree(got: str, gold: str) -> None:
    assert same_answer(got, gold)


@pytest.mark.parametrize(("got", "gold"), [("4", "5"), ("\\frac{1}{3}", "0.3"), ("(1,2)", "(2,1)")])
def test_different_answers_do_not(got: str, gold: str) -> None:
    assert not same_answer(got, gold)


def test_normalise_drops_spacing_commands() -> None:
    assert normalise("\\! 1 \\, 2") == "12"


@pytest.mark.skipif(find_spec("math_verify") is None, reason="math_verify not installed")
def test_the_symbolic_fallback_decides_what_text_cannot() -> None:
    assert same_answer("\\sqrt{4}", "2")
    assert same_answer("2\\pi", "\\pi \\cdot 2")
    assert not same_answer("\\sqrt{5}", "2")


def test_a_rollout_that_never_ended_scores_zero_whatever_it_boxed() -> None:
    reward = BoxedReward([END])
    scores = reward(["\\boxed{4}", "\\boxed{4}"], ["4", "4"], completion_ids=[ENDED, CLIPPED])
    assert scores == [1.0, 0.0]


def test_every_sample_is_scored_and_the_gold_may_be_boxed_itself() -> None:
    reward = BoxedReward([END])
    completions = [
        [{"role": "assistant", "content": "thus \\boxed{12}"}],  # chat completions
        "no box here",
        "\\boxed{7}",
    ]
    gold = ["The answer is \\boxed{12}", "3", "not a number"]
    assert reward(completions, gold, completion_ids=[ENDED] * 3) == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),  # GSM8K's form
        ("#### 1,000", "1,000"),
        ("the last marker #### 3\n#### 5", "5"),
        ("\\boxed{7} even with #### 8", "7"),  # a box wins
        ("42", "42"),
    ],
)
def test_the_gold_answer_is_its_box_else_what_follows_its_last_marker(
    gold: str, answer: str
) -> None:
    assert gold_answer(gold) == answer


def test_a_gsm8k_solution_grades_its_final_number() -> None:
    reward = BoxedReward([END])
    gold = "She sold 48 + 24 = <<48+24=72>>72 clips.\n#### 72"
    assert reward(["\\boxed{72}", "\\boxed{24}"], [gold, gold], completion_ids=[ENDED] * 2) == [
        1.0,
        0.0,
    ]


def test_the_reward_pickles_for_trls_spawned_rollout_worker() -> None:
    reward = pickle.loads(pickle.dumps(BoxedReward([END, 9])))
    assert reward.end_token_ids == {END, 9}
    assert reward.__name__ == "boxed_reward"
