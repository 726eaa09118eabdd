"""Every ``--help`` of the five programs, subcommands included (``rollout-proxy top`` once showed
no default), ends each flag's line with its default as a user writes it and names the variables
the program reads; a variable's value (a key) is never shown; a bad flag is one line, a prefix of
a flag is no flag (``--replica-url`` once started a proxy, ``--prompt-colum`` passed a dry run),
and a flag that is not there is answered with the closest one that is. No help shows
reStructuredText's double backticks, and every flag says what it is for."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import pytest

from deploy.cli import Runtime
from deploy.cli import main as deploy_main
from deploy.preflight import _Refusing
from proxy.config.programs import EnvDefault
from replica_entry.vllm_backend import build_parser as vllm_parser
from tests.support.clock import SteppingClock
from tests.support.programs import (
    CHILDREN,
    MICRO,
    PARSERS,
    TOOLS,
    every_parser,
    options,
    tool_parsers,
    walk,
)
from trainer_entry.flags import build_parser as trainer_parser

# Variables each program reads, named in its --help (flags' [env NAME], or the closing lines).
VARIABLES = {
    "rollout-proxy top": {"HF_TOKEN", "PROXY_API_KEY"},
    "rollout-replica": {"VLLM_API_KEY"},
    "rollout-replica --backend vllm": {"VLLM_API_KEY"},
    "rollout-trainer": {"HF_TOKEN", "PROXY_UPSTREAM_TOKEN"},
    "rollout-deploy up": {"HF_TOKEN", "HF_ENDPOINT"},
    "rollout-deploy status": {"HF_TOKEN", "HF_ENDPOINT"},
    "rollout-deploy logs": {"HF_TOKEN", "HF_ENDPOINT"},
    "rollout-deploy down": {"HF_TOKEN", "HF_ENDPOINT"},
    "rollout-deploy rehearse": {"HF_ENDPOINT"},
    "rollout-deploy fleet up": {"HF_TOKEN", "HF_ENDPOINT"},
    "rollout-deploy fleet status": {"HF_TOKEN", "HF_ENDPOINT"},
    "rollout-deploy fleet down": {"HF_TOKEN", "HF_ENDPOINT"},
}


@pytest.mark.parametrize("parser", every_parser(), ids=lambda p: p.prog)
def test_every_flag_shows_its_default(parser: argparse.ArgumentParser) -> None:
    formatter = parser._get_formatter()
    for action in options(parser):
        flag = action.option_strings[0]
        shown = formatter._expand_help(action)
        assert action.help and "\n" not in action.help, f"{parser.prog} {flag}: no help"
        assert not action.help.startswith("("), f"{parser.prog} {flag}: a default, no help"
        assert "default: " in shown or shown.endswith("(required)"), f"{parser.prog} {flag}"
        assert "None" not in shown, f"{parser.prog} {flag}: {shown}"
        if isinstance(action, EnvDefault):
            assert shown.endswith(f" [env {action.env}]"), f"{parser.prog} {flag}: {shown}"
    assert "--help" in parser.format_help()


def test_the_proxys_every_flag_names_its_variable() -> None:
    for action in options(PARSERS["rollout-proxy"]()):
        assert (action.help or "").endswith(f"[env PROXY_{action.dest.upper()}]"), action.dest


@pytest.mark.parametrize("prog", VARIABLES)
def test_each_program_names_the_variables_it_reads(prog: str) -> None:
    parsers = {p.prog: p for build in PARSERS.values() for p in walk(build())}
    text = " ".join(parsers[prog].format_help().split())  # unwrapped
    for variable in VARIABLES[prog]:
        assert variable in text, f"{prog}: {variable}"


def test_a_flag_read_from_a_variable_never_shows_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sekrit-key")
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    replica = PARSERS["rollout-replica"]()
    assert "sekrit" not in replica.format_help()
    assert replica.parse_args(["--backend", "sim"]).api_key == "sekrit-key"
    deploy = PARSERS["rollout-deploy"]()
    args = deploy.parse_args(["status", "--run-name", "r"])
    assert args.hub_endpoint == "https://hub.example"
    # vLLM reads its own key: the replica's parser leaves it to vLLM (a job's preflight checks
    # the job's variables, not this machine's).
    assert (
        PARSERS["rollout-replica --backend vllm"]()
        .parse_args(["--backend", "vllm", "--model", "m"])
        .api_key
        is None
    )


@pytest.mark.parametrize("parser", every_parser(), ids=lambda p: p.prog)
def test_a_bad_flag_is_one_line_pointing_at_the_help(
    parser: argparse.ArgumentParser, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--no-such-flag"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err, err
    assert err.startswith(f"{parser.prog}: ") and err.endswith(" --help lists the flags)\n")


def test_no_help_shows_double_backticks() -> None:
    for parser in [*every_parser(), *tool_parsers()]:
        assert "``" not in parser.format_help(), parser.prog


def test_no_parser_takes_an_abbreviation() -> None:
    parsers = [*every_parser(), *tool_parsers((*TOOLS, *CHILDREN, *MICRO))]
    parsers += [build(_Refusing) for build in (trainer_parser, vllm_parser)]  # deploy's preflight
    assert [p.prog for p in parsers if p.allow_abbrev] == []


TRAINER = [
    "--model",
    "m",
    "--dataset",
    "d.jsonl",
    "--output-dir",
    "o",
    "--replica-urls",
    "http://a:1",
]
# program, the arguments, the flag the misspelt one is closest to
MISSPELT = [
    ("rollout-proxy", ["--replica-url", "x"], "--replica-urls"),
    ("rollout-proxy", ["--replcia-urls", "x"], "--replica-urls"),
    ("rollout-proxy top", ["--interva", "2"], "--interval"),
    ("rollout-replica", ["--backend", "sim", "--por", "1"], "--port"),
    ("rollout-replica --backend vllm", ["--backend", "vllm", "--model", "m", "--vllm-buil", "vllm"],
     "--vllm-build"),
    ("rollout-trainer", [*TRAINER, "--prompt-colum", "q"], "--prompt-column"),
    ("rollout-deploy", ["up", "--bucket", "a/b", "--model", "m", "--replica-coun", "1"],
     "--replica-count"),
    ("rollout-deploy", ["logs", "--run-name", "r", "--folow"], "--follow"),
    ("python -m benchmarks", ["overhead", "--replica-url", "http://x"], "--replica-urls"),
    ("python -m benchmarks fleet", ["--max-replica-coun", "4"], "--max-replica-count"),
    ("python -m benchmarks learn", ["--step", "10"], "--steps"),
]  # fmt: skip


@pytest.mark.parametrize(("program", "argv", "flag"), MISSPELT)
def test_a_misspelt_or_shortened_flag_is_refused_naming_the_closest(
    program: str, argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        PARSERS[program]().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: " in err and f"did you mean {flag}?" in err, err


def test_the_proxy_answers_a_mistyped_flag_and_refuses_a_prefix() -> None:
    """The issue's words: ``rollout-proxy --replcia-urls x`` answers "did you mean
    --replica-urls"; ``--replica-url x`` is refused (it once started a proxy)."""
    for typed in ("--replcia-urls", "--replica-url"):
        done = subprocess.run(
            [sys.executable, "-m", "proxy", typed, "http://127.0.0.1:9"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr == (
            f"rollout-proxy: unrecognized arguments: {typed} http://127.0.0.1:9: did you mean "
            "--replica-urls? (rollout-proxy --help lists the flags)\n"
        )


def test_a_shortened_trainer_flag_fails_deploys_dry_run() -> None:
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=SteppingClock(), token=lambda: None, out=out, err=err)
    argv = ["up", "--bucket", "a/b", "--model", "m", "--replica-count", "1", "--dry-run", "--",
            "--dataset", "openai/gsm8k", "--prompt-colum", "question"]  # fmt: skip
    assert deploy_main(argv, runtime) == 2
    assert "--prompt-colum question: did you mean --prompt-column?" in err.getvalue()
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # argparse finds a subcommand's unknown flag at the top: still the subcommand's help
        (["status", "--run-name", "r", "--namespce", "n"], "rollout-deploy status"),
        # up's own checks after parsing are given the top parser: still up's name
        (["up", "--run-name", "r", "--bucket", "b", "--model", "m"], "rollout-deploy up"),
    ],
)
def test_a_subcommands_error_names_the_subcommand_and_its_help(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        deploy_main(argv, Runtime(clock=SteppingClock(), token=lambda: None))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{said}: error: ") and err.endswith(f"({said} --help lists the flags)\n")
