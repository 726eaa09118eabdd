"""``deploy up``'s flags as users write them: every duration flag takes ``30m``, ``90s``, ``1h``
or a plain number of seconds (one parser, ``proxy.config.units``), and a flavor HF Jobs does not
have stops at the command line with the list, before any plan is made."""

from __future__ import annotations

import argparse

import pytest

from deploy.cli import Runtime, build_parser, main
from deploy.up_flags import FLAVORS
from proxy.config.units import DurationArg
from tests.deploy.conftest import TRAINER_ARGS
from tests.deploy.test_dry_run import ARGS, dry_run
from tests.support.clock import SteppingClock as FakeClock
from tests.support.programs import walk

DURATION_FLAGS = (
    ("up", "--timeout"),
    ("up", "--ready-timeout"),
    ("up", "--poll-interval"),
    ("rehearse", "--ready-timeout"),
    ("rehearse", "--train-timeout"),
)
UP = ("--bucket", "team/rl", "--model", "m", "--replica-count", "1")
duration = DurationArg(positive=True)  # every timeout flag's rule


def _parsed(command: str, flag: str, value: str) -> float:
    args = build_parser().parse_args([command, *UP, flag, value])
    seconds: float = getattr(args, flag.removeprefix("--").replace("-", "_"))
    return seconds


@pytest.mark.parametrize(("command", "flag"), DURATION_FLAGS)
@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30m", 1800), ("90s", 90), ("1h", 3600), ("1800", 1800), ("1.5h", 5400), ("6H", 21600)],
)
def test_every_duration_flag_reads_durations_as_users_write_them(
    command: str, flag: str, value: str, seconds: float
) -> None:
    assert _parsed(command, flag, value) == seconds


@pytest.mark.parametrize(("command", "flag"), DURATION_FLAGS)
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("30x", "a number of seconds, or one with a unit: 500ms, 60s, 60 s, 2m, 1h, 1d"),
        ("h", "a number of seconds, or one with a unit: 500ms, 60s, 60 s, 2m, 1h, 1d"),
        ("0m", "must be longer than 0 (got '0m')"),
        ("-5", "must be longer than 0 (got '-5')"),
    ],
)
def test_a_malformed_duration_exits_2_naming_the_flag(
    command: str, flag: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, *UP, flag, value])
    assert exit_info.value.code == 2
    (last,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert last.startswith(f"rollout-deploy {command}: error: argument {flag}: {why}")


def test_the_job_lifetimes_follow_the_parsed_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    with_units = dry_run("--timeout", "90m", "--ready-timeout", "30m", monkeypatch=monkeypatch)
    plain = dry_run("--timeout", "5400", "--ready-timeout", "1800", monkeypatch=monkeypatch)
    assert [spec["timeout"] for spec in with_units] == ["2h", "2h", "90m"]
    assert [spec["timeout"] for spec in plain] == ["2h", "2h", "90m"]


def test_the_durations_parser_is_the_clients_rule_with_plain_seconds() -> None:
    assert duration("45") == duration("45s") == duration("45 s") == 45
    assert duration(" 2d ") == 172800
    assert duration("500ms") == 0.5  # the proxy's rule: one rule for every program
    with pytest.raises(argparse.ArgumentTypeError, match="got 'nan'"):
        duration("nan")


@pytest.mark.parametrize("flag", ["--replica-flavor", "--trainer-flavor", "--proxy-flavor"])
def test_an_unknown_flavor_exits_2_with_the_known_ones(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = Runtime(clock=FakeClock())
    with pytest.raises(SystemExit) as exit_info:
        main([*ARGS, "--dry-run", flag, "h300", *TRAINER_ARGS], runtime)
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert not err.out  # no plan printed
    last = err.err.strip().splitlines()[-1]
    assert f"argument {flag}: invalid choice: 'h300'" in last
    assert all(f"'{flavor}'" in last for flavor in ("h200", "h200x8", "a100-large", "cpu-basic"))


def test_the_known_flavors_are_huggingface_hubs() -> None:
    from huggingface_hub import JobHardware

    assert set(FLAVORS) == {flavor.value for flavor in JobHardware}
    for flavor in ("h200", "h200x2", "cpu-upgrade"):  # the defaults are among them
        assert flavor in FLAVORS


def test_only_the_commands_with_a_dry_run_say_it_needs_no_token() -> None:
    """``status``, ``logs`` and ``down --help`` ended with "(not for --dry-run)", a flag they do
    not have (issue 49, point 11)."""
    for parser in walk(build_parser()):
        flags = {name for action in parser._actions for name in action.option_strings}
        text = parser.format_help()
        assert ("--dry-run" in text) == ("--dry-run" in flags), parser.prog


def test_sim_args_without_the_simulated_backend_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A flag that needs another is a bad flag (exit 2), as every other one, not a failure."""
    argv = ["rehearse", *ARGS[1:], "--dry-run", "--sim-args", "--gen-token-s 0.1", *TRAINER_ARGS]
    assert main(argv, Runtime(clock=FakeClock())) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--sim-args are the simulated replicas' flags: add --replica-backend sim" in err[-1]
