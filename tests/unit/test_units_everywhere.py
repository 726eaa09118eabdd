"""One parser of durations and sizes for every program (``proxy.config.units``): each duration or
size flag of the five takes ``90s``, ``500ms``, ``30m``, ``1GiB`` as ``rollout-proxy`` does, a flag
named after its unit (``--gen-token-s``, ``--save-minutes``, ``--cpu-kvcache-gib``) still reads
a bare number in that unit, ``--help`` shows each default in a form the flag reads back, and a
bare number more likely meant in another unit is refused naming the flag and the forms."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from proxy.cli import load_settings
from proxy.config.programs import shown_default
from proxy.config.units import LIFETIME, QUICK, DurationArg, SizeArg, show_bytes, show_seconds
from replica_entry.cli import settings_from_args
from tests.support.programs import PARSERS, every_parser, options

DURATION_NAME = re.compile(r"(timeout|interval|-s|-minutes|seconds)$")
SIZE_NAME = re.compile(r"(-bytes|-gib)$")
SIM = ["--backend", "sim"]
VLLM = ["--backend", "vllm", "--model", "m"]
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


def _parse(program: str, argv: list[str]) -> argparse.Namespace:
    return PARSERS[program]().parse_args(argv)


# The proxy's own flags are its settings', read by the same module through pydantic
# (tests/unit/test_units.py); every other parser's through argparse types.
ARGPARSE_TYPED = [p for p in every_parser() if p.prog != "rollout-proxy"]


@pytest.mark.parametrize("parser", ARGPARSE_TYPED, ids=lambda p: p.prog)
def test_every_duration_and_size_flag_is_read_by_the_one_parser(
    parser: argparse.ArgumentParser,
) -> None:
    """Told by its name (``--ready-timeout``, ``--gen-token-s``, ``--adapter-max-bytes``)."""
    for action in options(parser):
        flag = action.option_strings[0]
        if DURATION_NAME.search(flag):
            assert isinstance(action.type, DurationArg), f"{parser.prog} {flag}"
        if SIZE_NAME.search(flag) or flag == "--kv-bytes-per-token":
            assert isinstance(action.type, SizeArg), f"{parser.prog} {flag}"
        if isinstance(action.type, DurationArg | SizeArg) and action.default is not None:
            value = (
                action.type(action.default) if isinstance(action.default, str) else action.default
            )
            shown = shown_default(action).removeprefix("default: ")
            assert action.type(shown) == pytest.approx(value), f"{flag}: {shown!r}"


@pytest.mark.parametrize(
    ("program", "argv", "dest", "expected"),
    [
        ("rollout-replica", [*SIM, "--gen-token-s", "0.05"], "gen_token_s", 0.05),
        ("rollout-replica", [*SIM, "--gen-token-s", "50ms"], "gen_token_s", 0.05),
        ("rollout-replica", [*SIM, "--mount-lag-s", "2s"], "mount_lag_s", 2.0),
        ("rollout-replica", [*SIM, "--delay-s", "1.5"], "delay_s", 1.5),
        ("rollout-replica", [*SIM, "--adapter-max-bytes", "1GiB"], "adapter_max_bytes", 1 << 30),
        ("rollout-replica", [*SIM, "--adapter-store-max-bytes", "2048"], "adapter_store_max_bytes",
         2048),
        ("rollout-replica --backend vllm", [*VLLM, "--adapter-max-bytes", "1GiB"],
         "adapter_max_bytes", 1 << 30),
        ("rollout-replica --backend vllm", [*VLLM, "--cpu-kvcache-gib", "4"], "cpu_kvcache_gib", 4),
        ("rollout-replica --backend vllm", [*VLLM, "--cpu-kvcache-gib", "512MiB"],
         "cpu_kvcache_gib", 0.5),
        ("rollout-replica --backend vllm", [*VLLM, "--ready-timeout", "90s"], "ready_timeout", 90),
        ("rollout-trainer", [*TRAINER, "--save-minutes", "30"], "save_minutes", 30),
        ("rollout-trainer", [*TRAINER, "--save-minutes", "30m"], "save_minutes", 30),
        ("rollout-trainer", [*TRAINER, "--save-minutes", "1h"], "save_minutes", 60),
        ("rollout-trainer", [*TRAINER, "--save-minutes", "90s"], "save_minutes", 1.5),
        ("rollout-trainer", [*TRAINER, "--ready-timeout", "4m"], "server_timeout", 240),
        ("rollout-proxy top", ["--interval", "500ms"], "interval", 0.5),
        ("python -m benchmarks", ["soak", "--seconds", "5m"], "seconds", 300),
        ("python -m benchmarks fleet", ["--sync-push-s", "130ms"], "sync_push_s", 0.13),
        ("python -m benchmarks fleet", ["--train-s", "3.5"], "train_s", 3.5),
    ],
)  # fmt: skip
def test_durations_and_sizes_are_taken_as_the_proxy_takes_them(
    program: str, argv: list[str], dest: str, expected: float
) -> None:
    assert getattr(_parse(program, argv), dest) == pytest.approx(expected)


def test_a_size_with_junk_after_it_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """pydantic's ByteSize alone reads ``32 MiB!`` as 32 MiB."""
    with pytest.raises(SystemExit):
        load_settings(["--max-body-bytes", "32 MiB!"])
    assert "got '32 MiB!': not a byte size" in capsys.readouterr().err
    assert load_settings(["--max-body-bytes", " 32 MiB "]).client.max_body_bytes == 32 << 20


def test_the_simulated_replicas_settings_take_what_its_flags_read() -> None:
    parser = PARSERS["rollout-replica"]()
    argv = [*SIM, "--gen-token-s", "4ms", "--adapter-max-bytes", "64 MiB", "--mount-lag-s", "2s"]
    settings = settings_from_args(parser.parse_args(argv), parser)
    assert settings.gen_token_s == pytest.approx(0.004)
    assert settings.adapter_max_bytes == 64 << 20
    assert settings.faults.mount_lag_s == 2.0


@pytest.mark.parametrize(
    ("program", "argv", "said"),
    [
        ("rollout-replica", [*SIM, "--mount-lag-s", "soon"], "argument --mount-lag-s: a number of "
         "seconds, or one with a unit: 500ms, 60s, 60 s, 2m, 1h, 1d, not 'soon'"),
        ("rollout-replica", [*SIM, "--delay-s", "-1"], "argument --delay-s: must be >= 0"),
        ("rollout-replica", [*SIM, "--adapter-max-bytes", "1 GB!"], "argument --adapter-max-bytes: "
         "not a byte size: give a number of bytes, or one with a unit"),
        ("rollout-replica", [*SIM, "--adapter-max-bytes", "0"], "argument --adapter-max-bytes: "
         "must be above 0"),
        ("rollout-trainer", [*TRAINER, "--save-minutes", "half"], "argument --save-minutes: a "
         "number of minutes, or one with a unit"),
        ("rollout-deploy", ["up", "--bucket", "a/b", "--model", "m", "--timeout", "6"],
         "argument --timeout: a bare number is seconds, and this setting takes at least 60 of them "
         "bare: write 6m or 6h, or 6s if seconds are meant (got '6')"),
        ("rollout-proxy top", ["--interval", "500"], "argument --interval: a bare number is "
         "seconds, and this setting takes at most 300 of them bare: write 500ms, or 500s if "
         "seconds are meant (got '500')"),
    ],
)  # fmt: skip
def test_a_bad_duration_or_size_is_one_line_naming_the_flag_and_the_forms(
    program: str, argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _parse(program, argv)
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert said in line


def test_a_bare_number_is_seconds_unless_it_must_have_meant_another_unit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--health-interval 500`` was 500 s, silently; a probe's or an interval's bare number is
    seconds up to 300 (``QUICK``), a job's lifetime from 60 (``LIFETIME``); with a unit any
    value within the setting's own bounds is taken."""
    assert load_settings(["--health-interval", "300"]).health.interval_s == 300
    assert load_settings(["--health-interval", "500s"]).health.interval_s == 500
    assert load_settings(["--health-interval", "500ms"]).health.interval_s == 0.5
    assert load_settings(["--request-timeout", "5000"]).upstream.request_timeout_s == 5000
    for argv in (["--health-interval", "500"], ["--connect-timeout", "1000"]):
        with pytest.raises(SystemExit) as info:
            load_settings(argv)
        assert info.value.code == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert f"invalid setting {argv[0]} (PROXY_" in line
        assert "at most 300 of them bare: write " in line and "ms, or " in line
    monkeypatch.setenv("PROXY_HEALTH_INTERVAL", "500")
    with pytest.raises(SystemExit):
        load_settings([])
    assert "invalid setting PROXY_HEALTH_INTERVAL: got '500'" in capsys.readouterr().err
    monkeypatch.delenv("PROXY_HEALTH_INTERVAL")
    config = tmp_path / "proxy.toml"
    config.write_text("load_timeout = 900\n")
    with pytest.raises(SystemExit):
        load_settings(["--config", str(config)])
    assert f"invalid setting load_timeout in {config}: got 900" in capsys.readouterr().err
    assert QUICK.high == 300 and LIFETIME.low == 60


def _help(program: str, flag: str) -> str:
    parser = PARSERS[program]()
    action = next(a for a in parser._actions if flag in a.option_strings)
    return parser._get_formatter()._expand_help(action)


@pytest.mark.parametrize(
    ("program", "flag", "shown"),
    [
        ("rollout-replica --backend vllm", "--ready-timeout", "(default: 15 min)"),
        ("rollout-replica --backend vllm", "--adapter-max-bytes", "(default: 1 GiB)"),
        ("rollout-replica --backend vllm", "--cpu-kvcache-gib", "(default: 1 GiB)"),
        ("rollout-replica", "--adapter-max-bytes", "(default: 1 GiB)"),  # was 1073741824
        ("rollout-replica", "--gen-token-s", "(default: 0 s)"),
        ("rollout-trainer", "--save-minutes", "(default: 30 min)"),
        ("rollout-trainer", "--ready-timeout", "(default: 4 min)"),
        ("rollout-proxy top", "--interval", "(default: 2 s)"),
        ("rollout-proxy", "--request-timeout", "(default: 15 min)"),  # was 900 s
        ("python -m benchmarks fleet", "--sync-save-s", "(default: 1.1 s)"),
    ],
)
def test_help_shows_durations_and_sizes_as_they_are_read(
    program: str, flag: str, shown: str
) -> None:
    assert shown in _help(program, flag)


def test_durations_and_sizes_are_shown_in_the_largest_whole_unit() -> None:
    texts = "".join(build().format_help() for build in PARSERS.values())
    assert "1073741824" not in texts and "8589934592" not in texts
    assert [show_seconds(s) for s in (0.5, 60, 900, 3600, 21600)] == [
        "0.5 s", "60 s", "15 min", "1 h", "6 h",
    ]  # fmt: skip
    assert show_bytes(1 << 30) == "1 GiB" and show_bytes(1000) == "1000 bytes"
