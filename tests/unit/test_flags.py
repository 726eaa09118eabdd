"""``rollout-proxy --help`` is made from the settings: every flag says what it does, its default
and its variable; metavars say what a value looks like; ``--version`` says what is running."""

from __future__ import annotations

import argparse

import pytest

from proxy import __version__
from proxy.cli import main, parse_args
from proxy.config import build_parser, field_of, flat_fields, parse_bytes, parse_seconds


def setting_actions() -> list[argparse.Action]:
    return [a for a in build_parser()._actions if a.dest not in ("help", "version")]


def test_every_flag_has_a_line_of_help_its_default_and_its_variable() -> None:
    actions = setting_actions()
    assert sorted(action.dest for action in actions) == sorted(flat_fields())
    for action in actions:
        flag, text = action.option_strings[0], action.help or ""
        what, _, rest = text.partition(" (default: ")
        assert what.strip(), f"{flag} has no help text"
        assert rest and not rest.startswith(")"), f"{flag} shows no default: {text!r}"
        assert text.endswith(f"[env PROXY_{action.dest.upper()}]"), text
        assert action.metavar != "VALUE", flag


@pytest.mark.parametrize(
    ("flag", "shown"),
    [
        ("--queue-timeout", "(default: 60 s)"),
        ("--max-body-bytes", "(default: 32 MiB)"),
        ("--max-body-bytes-in-flight", "(default: 1 GiB)"),
        ("--max-inflight", "(default: per-replica cap x replicas)"),
        ("--watch-interval", "(default: 0.5 s for a dir, 2 s for a bucket)"),
        ("--tls-verify", "(default: on)"),
        ("--supervise", "(default: off)"),
        ("--port", "(default: 8000)"),
        ("--replica-urls", "(default: none)"),
        ("--policy", "(default: prefix)"),
        ("--load-factor", "(default: 1.25)"),
    ],
)
def test_defaults_read_as_a_user_writes_them(flag: str, shown: str) -> None:
    action = next(a for a in setting_actions() if flag in a.option_strings)
    assert shown in (action.help or "")


def test_a_shown_duration_or_size_reads_back_as_the_default() -> None:
    for action in setting_actions():
        parse = {"SECONDS": parse_seconds, "BYTES": parse_bytes}.get(str(action.metavar))
        default = field_of(action.dest).default
        if parse is None or default is None:
            continue
        shown = (action.help or "").split(" (default: ")[1].split(")")[0]
        assert parse(shown.replace(" bytes", "")) == default, (action.dest, shown)


@pytest.mark.parametrize(
    ("flag", "metavar"),
    [
        ("--replica-urls", "URLS"),
        ("--queue-timeout", "SECONDS"),
        ("--max-body-bytes", "BYTES"),
        ("--adapter-push-rate", "BYTES"),
        ("--eject-after", "N"),
        ("--config", "PATH"),
        ("--api-key", "KEY"),
        ("--kv-high", "FRACTION"),
        ("--log-level", "{debug,info,warning,error}"),
        ("--policy", "{prefix,least_loaded,round_robin}"),
    ],
)
def test_metavars_say_what_a_value_looks_like(flag: str, metavar: str) -> None:
    action = next(a for a in setting_actions() if flag in a.option_strings)
    assert action.metavar == metavar


def test_each_boolean_setting_is_a_yes_no_pair() -> None:
    pairs = {
        action.dest
        for action in setting_actions()
        if isinstance(action, argparse.BooleanOptionalAction)
    }
    assert pairs == {name for name in flat_fields() if isinstance(field_of(name).default, bool)}
    assert parse_args(["--no-tls-verify", "--access-log"]) == {
        "tls_verify": False,
        "access_log": True,
    }


def test_help_names_top_and_the_units(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "rollout-proxy top [URL]" in out
    assert "500ms" in out and "32MiB" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"rollout-proxy {__version__}\n"


def test_an_unknown_flag_is_one_line_saying_where_the_flags_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--queue-timeout", "5", "mins"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err
        == "rollout-proxy: unrecognized arguments: mins (rollout-proxy --help lists the flags)\n"
    )
