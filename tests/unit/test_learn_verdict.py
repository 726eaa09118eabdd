"""The learning benchmark's pure parts: its verdict on a run's figures, TRL's log line read
back, the task's reward, and its command line's refusals (no heavy tier needed)."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from benchmarks.learn.cli import main
from benchmarks.learn.legs import figures_of
from benchmarks.learn.task import conversations, digit_share
from benchmarks.learn.verdict import KL_BOUND, judge

# TRL 1.16's log line of one step (trimmed), as the trainer's log holds it.
LINE = (
    "{'loss': '0.01', 'grad_norm': '0.3', 'reward': '0.41', 'reward_std': '0.2', "
    "'ratio': '1', 'kl': '0.012', 'entropy': '3.1', 'epoch': '0.2'}"
)


def steps(rewards: list[float], kl: float = 0.01) -> list[dict[str, float]]:
    return [{"reward": r, "kl": kl} for r in rewards]


def test_a_rise_beyond_three_spreads_of_the_first_steps_is_learning() -> None:
    verdict = judge(steps([0.35, 0.34, 0.36, 0.38, 0.41, 0.5, 0.6, 0.8, 0.84, 0.83, 0.84, 0.84]))
    assert verdict.learned and verdict.on_policy
    assert verdict.first_mean == pytest.approx(0.368)
    assert verdict.margin > verdict.wanted


def test_a_flat_or_noisy_run_is_not_and_a_flat_start_cannot_make_any_rise_pass() -> None:
    noisy = [0.3, 0.5, 0.2, 0.6, 0.4, 0.5, 0.3, 0.6, 0.4, 0.5]
    assert not judge(steps(noisy)).learned  # the flat run: noise, not learning
    flat_start = [0.4] * 5 + [0.4, 0.4, 0.41, 0.41, 0.41]
    assert not judge(steps(flat_start)).learned  # the spread is floored


def test_a_tenth_of_the_steps_may_spike_over_the_kl_bound_and_one_more_is_off_policy() -> None:
    run = steps([0.3] * 5 + [0.9] * 25)
    for spiked in (6, 17, 23):  # single tokens' ratios (the CI run's step 23 read 1.386)
        run[spiked]["kl"] = 1.386
    verdict = judge(run)
    assert verdict.on_policy and verdict.kl_max == 1.386 and verdict.kl_typical == 0.01
    assert "kl max 1.386, 0.010 without its 3 highest steps" in verdict.line()
    run[9]["kl"] = KL_BOUND  # a fourth: not a few tokens any more
    assert not judge(run).on_policy
    ten = steps([0.3] * 5 + [0.9] * 5)
    ten[6]["kl"] = KL_BOUND  # of 10 steps, one may spike
    assert judge(ten).on_policy
    ten[8]["kl"] = KL_BOUND
    assert not judge(ten).on_policy
    with pytest.raises(ValueError, match="needs 10"):
        judge(ten[:9])


def test_trls_log_line_is_read_back() -> None:
    assert figures_of(f"  7%|| 2/30 [00:05<01:10] {LINE}") == {
        "reward": 0.41, "reward_std": 0.2, "kl": 0.012, "ratio": 1.0, "entropy": 3.1
    }  # fmt: skip
    assert figures_of("{'loss': '0.01', 'train_runtime': '9'}") is None  # the closing summary
    assert figures_of("no figures here") is None


def test_the_reward_is_the_digit_share_of_the_non_space_characters() -> None:
    assert digit_share(["12 ab", "", "   ", "99", [{"role": "assistant", "content": "a1"}]]) == [
        0.5, 0.0, 0.0, 1.0, 0.5
    ]  # fmt: skip
    lines = [c[1]["content"] for c in conversations(0, 200)]
    shares = digit_share(lines)
    assert min(shares) == 0.0 and max(shares) == 1.0  # the warm-up shows every share


def test_the_command_refuses_unknown_legs_and_too_few_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--legs", "both"])
    assert "--legs: both" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--steps", "4"])
    assert "at least 10" in capsys.readouterr().err


@pytest.mark.skipif(find_spec("vllm") is not None, reason="the heavy tier is here: it would run")
def test_without_the_heavy_tier_it_says_which_python_to_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 2
    assert ".venv-e2e/bin/python -m benchmarks learn" in capsys.readouterr().err
