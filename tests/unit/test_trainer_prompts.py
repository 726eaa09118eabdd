"""The format instruction (``trainer_entry.prompts``): every prompt asks for the answer shape the
chosen rewards read, and an answer written as it asks scores full marks. Built without torch or
datasets: the rows are what ``trainer_entry.train.load_prompts`` maps each prompt to."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer_entry import math_data
from trainer_entry.boxed import BoxedReward
from trainer_entry.flags import build_parser, options_from_args
from trainer_entry.options import TrainerOptions
from trainer_entry.prompts import BOXED, THINK_ANSWER, conversation
from trainer_entry.rewards import format_reward, math_answer_reward


def _options(*flags: str, tmp_path: Path) -> TrainerOptions:
    parser = build_parser()
    argv = ["--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path)]
    argv += ["--sidecar-replicas", "http://127.0.0.1:9", *flags]
    return options_from_args(parser.parse_args(argv), parser)


def _row(prompt: str | list[dict[str, str]], options: TrainerOptions) -> list[dict[str, str]]:
    return conversation(prompt, options.system_prompt, options.format_instruction)


@pytest.mark.parametrize(
    ("rewards", "instruction"),
    [
        ("boxed", BOXED),
        ("format", THINK_ANSWER),
        ("math,format", THINK_ANSWER),
        ("math", THINK_ANSWER),
        ("tests.e2e.rewards:length_reward", ""),
    ],
)
def test_the_default_instruction_is_the_one_the_rewards_read(
    rewards: str, instruction: str, tmp_path: Path
) -> None:
    assert _options("--rewards", rewards, tmp_path=tmp_path).format_instruction == instruction


def test_a_text_prompt_asks_for_the_format_and_an_answer_so_written_scores_full_marks(
    tmp_path: Path,
) -> None:
    options = _options(
        "--rewards", "math,format", "--system-prompt", "Be brief.", tmp_path=tmp_path
    )
    system, user = _row("What is 6 * 7?", options)
    assert system == {"role": "system", "content": f"Be brief.\n\n{THINK_ANSWER}"}
    assert user == {"role": "user", "content": "What is 6 * 7?"}
    followed = [[{"role": "assistant", "content": "<think>6 * 7 = 42</think> Answer: 42"}]]
    assert format_reward(followed) == [0.5]  # the format reward's full marks
    assert math_answer_reward(followed, answer=["42"]) == [1.0]


def test_the_boxed_instruction_is_what_the_boxed_reward_grades(tmp_path: Path) -> None:
    options = _options(tmp_path=tmp_path)  # the published run's reward: boxed
    system, _ = _row("What is 6 * 7?", options)
    assert "\\boxed{}" in system["content"]
    followed = ["6 * 7 = 42, so the answer is \\boxed{42}."]
    assert BoxedReward(end_token_ids=[0])(followed, answer=["42"]) == [1.0]


def test_a_conversation_gets_the_instruction_once(tmp_path: Path) -> None:
    options = _options("--rewards", "format", tmp_path=tmp_path)
    user = {"role": "user", "content": "What is 1 + 1?"}
    assert _row([user], options) == [{"role": "system", "content": THINK_ANSWER}, user]
    own = [{"role": "system", "content": "You add numbers."}, user]
    assert _row(own, options)[0]["content"] == f"You add numbers.\n\n{THINK_ANSWER}"
    generated = math_data.rows(1, seed=0)[0]["prompt"]  # says it already: left as it is
    assert _row(generated, options) == generated


def test_an_empty_instruction_turns_it_off(tmp_path: Path) -> None:
    options = _options("--rewards", "format", "--format-instruction", "", tmp_path=tmp_path)
    assert _row("What is 1 + 1?", options) == [{"role": "user", "content": "What is 1 + 1?"}]
    own = _options("--format-instruction", "End with ANSWER=N.", tmp_path=tmp_path)
    assert _row("q", own)[0] == {"role": "system", "content": "End with ANSWER=N."}
