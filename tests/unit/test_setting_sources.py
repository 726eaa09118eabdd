"""A setting's error names where the user wrote it: the flag, the variable, or the file's key; a
``PROXY_*`` variable that is no setting stops start-up, as a file's unknown key does; pydantic's
own wording never reaches the user."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from proxy.cli import load_settings, main
from proxy.config import Settings, describe_error, env_name, flat_fields

ROOT = Path(__file__).resolve().parents[2]


async def _never_serve(settings: Settings) -> None:
    raise AssertionError("the settings were taken: the proxy would have started")


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("proxy.cli.serve", _never_serve)  # settings it took would serve forever
        with pytest.raises(SystemExit) as info:
            main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_a_misspelled_variable_stops_start_up_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_POLCY", "round_robin")
    err = refused([], capsys)
    assert (
        err
        == "rollout-proxy: unknown environment variable PROXY_POLCY: did you mean PROXY_POLICY?\n"
    )


def test_a_variable_like_no_setting_points_at_the_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_ZZZZZZZZ", "1")
    err = refused([], capsys)
    assert "unknown environment variable PROXY_ZZZZZZZZ: rollout-proxy --help" in err


def test_every_proxy_variable_the_project_sets_is_a_setting() -> None:
    # The deploy plans, the trainer's sidecar and the images set PROXY_* for the proxy: each must
    # be a setting, or the proxy they start would now refuse to.
    known = {env_name(name) for name in flat_fields()}
    rooms = ("deploy", "trainer_entry", "replica_entry", "benchmarks", "monitoring", "proxy")
    found = {
        name
        for room in rooms
        for path in (ROOT / room).rglob("*")
        if path.suffix in (".py", ".sh", ".toml", ".yaml", ".yml") and "config" not in path.parts
        for name in re.findall(r"(?<![A-Za-z0-9_])PROXY_[A-Z][A-Z0-9_]*", path.read_text())
    }
    assert found, "the scan found no PROXY_ variable at all"
    assert found <= known, sorted(found - known)


def test_a_variables_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_KV_HIGH", "2")
    err = refused([], capsys)
    assert err == (
        "rollout-proxy: invalid setting PROXY_KV_HIGH: got '2': "
        "Input should be less than or equal to 1\n"
    )


def test_a_files_bad_value_names_the_key_as_written_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text("kv_high = 2.0\n")
    err = refused(["--config", str(config)], capsys)
    assert err == (
        f"rollout-proxy: invalid setting kv_high in {config}: got 2.0: "
        "Input should be less than or equal to 1\n"
    )


def test_a_flag_over_the_file_is_named_as_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text("kv_high = 0.5\n")
    monkeypatch.setenv("PROXY_KV_HIGH", "0.6")
    err = refused(["--config", str(config), "--kv-high", "3"], capsys)
    assert "invalid setting --kv-high (PROXY_KV_HIGH): got '3'" in err


def test_an_unknown_policy_is_said_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["--policy", "fastest"], capsys)
    assert err == (
        "rollout-proxy: invalid setting --policy (PROXY_POLICY): got 'fastest': "
        "not one of prefix, least_loaded, round_robin\n"
    )


def test_an_unknown_policy_in_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "proxy.json"
    config.write_text('{"policy": "fastest"}')
    err = refused(["--config", str(config)], capsys)
    assert f"invalid setting policy in {config}: got 'fastest': not one of prefix," in err


def test_a_prefix_setting_under_another_policy(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["--policy", "round_robin", "--vnodes", "8"], capsys)
    assert "--vnodes (PROXY_VNODES): got '8': this setting applies only to --policy prefix" in err


def test_an_extra_field_is_explained() -> None:
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({"bogus": 1})
    line = describe_error(info.value)
    assert "no such setting here (rollout-proxy --help lists them)" in line
    assert "Extra inputs" not in line


def test_a_settings_own_check_keeps_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["--max-body-bytes", "2GiB"], capsys)
    assert "must be at least --max-body-bytes" in err
    with pytest.raises(SystemExit):
        load_settings(["--adapters-local", "/tmp/a"])
    assert "give --adapters-local and --adapters-mirror together" in capsys.readouterr().err


def test_a_variable_over_the_file_is_named_as_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text("kv_high = 0.5\n")
    monkeypatch.setenv("PROXY_KV_HIGH", "2")
    err = refused(["--config", str(config)], capsys)
    assert "invalid setting PROXY_KV_HIGH: got '2'" in err
