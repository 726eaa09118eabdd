"""Every ``--help`` of the five programs, subcommands included (``rollout-proxy top`` once showed
no default), ends each flag's line with its default as a user writes it and names the variables
the program reads; a variable's value (a key) is never shown; a bad flag is one line."""

from __future__ import annotations

import argparse

import pytest

from proxy.config.programs import EnvDefault
from tests.support.programs import PARSERS, every_parser, options, walk

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
