"""Settings from flags, environment and file; bad values stop start-up naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import load_settings


def test_defaults_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROXY_PORT", raising=False)
    settings = load_settings(["--replica-urls", "http://a:1, https://b/", "--queue-timeout", "2.5"])
    assert settings.replica_urls == ["http://a:1", "https://b"]
    assert settings.limits.queue_timeout_s == 2.5
    assert settings.limits.max_inflight_per_replica == 128
    assert settings.upstream.request_timeout_s == 900
    assert settings.upstream.connect_timeout_s == 5
    assert settings.health.interval_s == 1 and settings.health.eject_after == 3


def test_the_bounds_security_md_names_are_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """SECURITY.md's table "What is bounded" quotes these defaults: a change must change it."""
    monkeypatch.delenv("PROXY_PORT", raising=False)
    settings = load_settings([])
    client, limits, upstream = settings.client, settings.limits, settings.upstream
    assert client.max_connections == 4096
    assert (client.keepalive_timeout_s, client.head_timeout_s) == (75, 10)
    assert (client.body_timeout_s, client.send_timeout_s) == (60, 60)
    assert (client.max_body_bytes, client.max_body_bytes_in_flight) == (32 << 20, 1 << 30)
    assert client.max_prompt_elements == 8192
    assert (limits.queue_size, limits.queue_timeout_s) == (4096, 60)
    assert upstream.max_answer_bytes == 256 << 20
    adapters = settings.adapters
    assert (adapters.push_buffer_bytes, adapters.push_stall_s) == (64 << 20, 30)
    assert (adapters.store_max_adapter_bytes, adapters.store_max_bytes) == (1 << 30, 8 << 30)


def test_env_then_flag_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_PORT", "9000")
    monkeypatch.setenv("PROXY_MAX_INFLIGHT_PER_REPLICA", "7")
    monkeypatch.setenv("PROXY_UPSTREAM_TOKEN", "hf_secret")
    settings = load_settings(["--port", "9001"])
    assert settings.port == 9001
    assert settings.limits.max_inflight_per_replica == 7
    assert settings.upstream.token is not None
    assert settings.upstream.token.get_secret_value() == "hf_secret"
    assert "hf_secret" not in repr(settings)


def test_config_file_is_lowest_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROXY_PORT", raising=False)
    config = tmp_path / "proxy.toml"
    config.write_text('port = 7000\nqueue_size = 5\nreplica_urls = ["http://x:1"]\n')
    settings = load_settings(["--config", str(config), "--queue-size", "6"])
    assert (settings.port, settings.limits.queue_size, settings.replica_urls) == (
        7000,
        6,
        ["http://x:1"],
    )


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--port", "70000"], ["--port", "PROXY_PORT", "70000", "less than or equal to 65535"]),
        (["--queue-timeout", "-1"], ["--queue-timeout", "-1", "greater than 0"]),
        (["--replica-urls", "ftp://x"], ["--replica-urls", "http://HOST:PORT"]),
        (["--max-inflight-per-replica", "lots"], ["--max-inflight-per-replica", "valid integer"]),
        (["--policy", "random"], ["--policy", "least_loaded"]),
    ],
)
def test_bad_values_exit_2_naming_the_field(
    argv: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        load_settings(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    for fragment in fragments:
        assert fragment in err


def test_secret_values_are_masked_in_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_UPSTREAM_TOKEN", "")
    with pytest.raises(SystemExit):
        load_settings(["--api-key", "sekrit-value", "--port", "-5"])
    assert "sekrit-value" not in capsys.readouterr().err


def test_a_bad_secret_value_is_named_but_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text("api_key = 12345678\n")  # a secret of the wrong type: the error is its
    with pytest.raises(SystemExit):
        load_settings(["--config", str(config)])
    err = capsys.readouterr().err
    assert f"invalid setting api_key in {config}: got ***" in err
    assert "12345678" not in err


def test_unknown_config_file_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text("prot = 1\n")
    with pytest.raises(SystemExit):
        load_settings(["--config", str(config)])
    assert "unknown setting prot: did you mean port?" in capsys.readouterr().err


def test_a_replica_url_with_credentials_is_refused_and_never_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        load_settings(["--replica-urls", "http://alice:s3cr3t@replica:8000"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--replica-urls" in err and "--upstream-token" in err
    assert "s3cr3t" not in err and "alice" not in err
    assert "http://***@replica:8000" in err


@pytest.mark.parametrize("given", [["--adapters-local", "/tmp/a"], ["--adapters-mirror", "/b"]])
def test_the_mirror_needs_both_its_directories(
    given: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        load_settings(given)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid setting --adapters (PROXY_ADAPTERS)" in err
    assert "give --adapters-local and --adapters-mirror together, or neither" in err


def test_the_mirror_with_both_directories(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROXY_PORT", raising=False)
    settings = load_settings(["--adapters-local", "/tmp/a", "--adapters-mirror", "/lora/r/x"])
    adapters = settings.adapters
    assert (adapters.local, adapters.mirror) == (Path("/tmp/a"), Path("/lora/r/x"))
    assert load_settings([]).adapters.local is None
