"""Durations and byte sizes as the README and users write them, in flags, variables and files;
junk refused in one line naming the setting and the forms it takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.cli import load_settings
from proxy.config import Settings, build_parser, field_of, flat_fields

MIB = 1 << 20


def flat(settings: Settings) -> dict[str, Any]:
    """Every setting by its flat name (a section's fields by their aliases)."""
    dumped = settings.model_dump(by_alias=True)
    values = {k: v for k, v in dumped.items() if not isinstance(v, dict)}
    for section in dumped.values():
        if isinstance(section, dict):
            values |= section
    return values


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2048", 2048),
        ("32MiB", 32 * MIB),
        ("32 MiB", 32 * MIB),
        ("32mib", 32 * MIB),
        ("1GiB", 1 << 30),
        ("64kB", 64_000),
        ("1MB", 1_000_000),
        ("1.5MiB", 3 * MIB // 2),
    ],
)
def test_byte_sizes(given: str, expected: int) -> None:
    assert load_settings(["--max-body-bytes", given]).client.max_body_bytes == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("60", 60.0),
        ("2.5", 2.5),
        ("60s", 60.0),
        ("60 s", 60.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("2 min", 120.0),
        ("1h", 3600.0),
        ("1H", 3600.0),
        ("1d", 86400.0),
    ],
)
def test_durations(given: str, expected: float) -> None:
    assert load_settings(["--queue-timeout", given]).limits.queue_timeout_s == expected


def test_every_duration_and_size_setting_takes_units() -> None:
    actions = build_parser()._actions
    seconds = [a.dest for a in actions if a.metavar == "SECONDS"]
    sizes = [a.dest for a in actions if a.metavar == "BYTES"]
    # Read off the defaults and names, not the metavars: a float setting is a duration unless
    # it is a ratio; a size says so in its name. (The prefix policy's chunk_bytes is a plain int:
    # proxy.routing sits below proxy.config.)
    ratios = {"kv_high", "load_factor", "max_ejection_percent"}
    floats = {n for n in flat_fields() if isinstance(field_of(n).default, float)} - ratios
    named = {n for n in flat_fields() if "bytes" in n or n.startswith("adapter_push_")}
    assert floats <= set(seconds), sorted(floats - set(seconds))
    assert named - {"chunk_bytes", "adapter_push_stall"} <= set(sizes), sorted(named)
    argv = [arg for name in seconds for arg in ("--" + name.replace("_", "-"), "1500ms")]
    argv += [arg for name in sizes for arg in ("--" + name.replace("_", "-"), "1 GiB")]
    values = flat(load_settings(argv))
    assert {name: values[name] for name in seconds} == dict.fromkeys(seconds, 1.5)
    assert {name: values[name] for name in sizes} == dict.fromkeys(sizes, 1 << 30)


def test_units_in_the_environment_and_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('max_body_bytes = "32 MiB"\nhealth_interval = "500ms"\n')
    monkeypatch.setenv("PROXY_QUEUE_TIMEOUT", "2m")
    monkeypatch.setenv("PROXY_ADAPTER_PUSH_BUFFER", "128MiB")
    settings = load_settings(["--config", str(config)])
    assert settings.client.max_body_bytes == 32 * MIB
    assert settings.health.interval_s == 0.5
    assert settings.limits.queue_timeout_s == 120.0
    assert settings.adapters.push_buffer_bytes == 128 * MIB


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (
            ["--max-body-bytes", "32 Mbs"],
            ["--max-body-bytes (PROXY_MAX_BODY_BYTES): got '32 Mbs': not a byte size", "32MiB"],
        ),
        (["--adapter-push-rate", "fast"], ["--adapter-push-rate", "not a byte size", "64kB"]),
        (["--queue-timeout", "soon"], ["--queue-timeout", "got 'soon': not a duration", "500ms"]),
        (["--health-interval", "5 w"], ["--health-interval", "not a duration", "2m, 1h, 1d"]),
        (["--queue-timeout", "-1"], ["--queue-timeout", "greater than 0"]),
        (["--max-body-bytes", "12"], ["--max-body-bytes", "greater than or equal to 1024"]),
    ],
)
def test_junk_is_refused_in_one_line_naming_the_setting(
    argv: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        load_settings(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err
    assert "Value error" not in err
