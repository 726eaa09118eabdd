"""The format instruction (``trainer_entry.prompts``): every prompt asks for the answer shape the
chosen rewards read, and an answer written as it asks scores full marks. Built without torch or
datasets: the rows are what ``trainer_entry.train.load_prompts`` maps each prompt to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer_entry import math_data
from trainer_entry.boxed import BoxedReward
from trainer_entry.flags import build_parser
from trainer_entry.freeze import options_from_args
from trainer_entry.options import TrainerOptions
from trainer_entry.prompts import (
    ANSWER,
    BOXED,
    BOXED_SHAPE,
    THINK_ANSWER,
    asked_shape,
    conversation,
    shape_mismatch,
)
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


SIDECAR = ("--sidecar-replicas", "http://127.0.0.1:9")


def _dataset_options(tmp_path: Path, rows: list[dict[str, object]], *flags: str) -> TrainerOptions:
    """The options for a local JSON-lines dataset of ``rows`` (what ``--rewards auto`` reads)."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    parser = build_parser()
    argv = ["--model", "m", "--dataset", str(data), "--output-dir", str(tmp_path / "run")]
    return options_from_args(parser.parse_args([*argv, *SIDECAR, *flags]), parser)


def test_math_data_rows_get_the_rewards_their_prompts_ask_for(tmp_path: Path) -> None:
    """The README's example: ``math_data``'s ``Answer: N`` prompts with the default rewards.
    Before, the default was ``boxed``, so every prompt asked for ``Answer: N`` AND a box."""
    rows = math_data.rows(4, seed=0)
    options = _dataset_options(tmp_path, rows)
    assert options.rewards == ("math", "format")
    system = _row(rows[0]["prompt"], options)[0]["content"]
    assert system.count(THINK_ANSWER) == 1 and "boxed" not in system
    assert asked_shape(rows[0]["prompt"]) == ANSWER
    assert shape_mismatch(options.rewards, ANSWER) is None


@pytest.mark.parametrize(
    ("prompt", "rewards"),
    [
        ([{"role": "system", "content": BOXED}, {"role": "user", "content": "1+1?"}], ("boxed",)),
        ("What is 1 + 1? Put it in \\boxed{}.", ("boxed",)),
        ("What is 1 + 1? End with Answer: N.", ("math", "format")),
        ("What is 1 + 1?", ("boxed",)),  # asks for nothing: the published run's grader
    ],
)
def test_auto_rewards_follow_the_first_rows_prompt(
    tmp_path: Path, prompt: object, rewards: tuple[str, ...]
) -> None:
    assert _dataset_options(tmp_path, [{"prompt": prompt, "answer": "2"}]).rewards == rewards


def test_a_dataset_the_launcher_cannot_read_gets_boxed(tmp_path: Path) -> None:
    """A Hub dataset, or a file in a job's bucket when deploy checks a plan (``here=False``)."""
    assert _options(tmp_path=tmp_path).rewards == ("boxed",)
    parser = build_parser()
    argv = ["--model", "m", "--dataset", "openai/gsm8k", "--output-dir", str(tmp_path), *SIDECAR]
    assert options_from_args(parser.parse_args(argv), parser).rewards == ("boxed",)


def test_rewards_named_against_the_prompts_are_said_in_one_line(tmp_path: Path) -> None:
    rows = math_data.rows(2, seed=0)
    options = _dataset_options(tmp_path, rows, "--rewards", "boxed")
    assert options.rewards == ("boxed",)  # the user's choice stands
    line = shape_mismatch(options.rewards, asked_shape(rows[0]["prompt"]))
    assert line is not None and "\n" not in line
    assert "ask for Answer: N, which --rewards boxed cannot read" in line
    assert "use --rewards math,format (or auto)" in line
    # math reads a box too; format does not.
    assert shape_mismatch(("math",), BOXED_SHAPE) is None
    assert "--rewards format cannot read" in (shape_mismatch(("math", "format"), BOXED_SHAPE) or "")
    assert shape_mismatch(("tests.e2e.rewards:length_reward",), ANSWER) is None
    assert shape_mismatch(("boxed",), None) is None


def test_a_first_row_that_is_not_json_stops_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data.jsonl").write_text("prompt,answer\n")
    parser = build_parser()
    argv = ["--model", "m", "--dataset", str(tmp_path / "data.jsonl"), "--output-dir", "o"]
    with pytest.raises(SystemExit) as stopped:
        options_from_args(parser.parse_args([*argv, *SIDECAR]), parser)
    assert stopped.value.code == 2
    assert "its first row is not JSON" in capsys.readouterr().err
