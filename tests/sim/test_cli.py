"""The replica entry point with ``--backend sim``: its command line parsed into settings (no
server started), and ``python -m replica_entry --backend sim`` as a process: ready line,
serving, clean stop."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from replica_entry.cli import build_parser, settings_from_args
from replica_entry.sim import Faults, SimSettings


def _settings(*argv: str) -> SimSettings:
    parser = build_parser()
    return settings_from_args(parser.parse_args(["--backend", "sim", *argv]), parser)


def test_flags_map_onto_settings_and_faults() -> None:
    settings = _settings(
        "--model", "m", "--max-model-len", "2048", "--max-loras", "7", "--max-lora-rank", "16",
        "--max-cpu-loras", "9", "--block-size", "32", "--cache-blocks", "10", "--seed", "3",
        "--prompt-token-s", "0.1", "--gen-token-s", "0.2", "--overhead-s", "0.3",
        "--batch-factor", "0.4", "--later-version", "5", "--later-gen-token-s", "0.05",
        "--vocab-size", "500", "--api-key", "k", "--unhealthy",
        "--delay-s", "1.5", "--fail-status", "503", "--drop-mid-response", "--mount-lag-s", "2",
    )  # fmt: skip
    assert settings == SimSettings(
        model="m", max_model_len=2048, max_loras=7, max_lora_rank=16, max_cpu_loras=9,
        block_size=32, cache_blocks=10, api_key="k", seed=3, prompt_token_s=0.1, gen_token_s=0.2,
        overhead_s=0.3, batch_factor=0.4, later_version=5, later_gen_token_s=0.05, vocab_size=500,
        faults=Faults(
            unhealthy=True, delay_s=1.5, fail_status=503, drop_mid_response=True, mount_lag_s=2.0
        ),
    )  # fmt: skip


def test_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert _settings() == SimSettings()


def test_the_api_key_defaults_to_vllm_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert _settings().api_key == "from-env"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--fail-status", "200"], "--fail-status"),
        (["--max-lora-rank", "3"], "--max-lora-rank"),
        (["--max-cpu-loras", "1"], "--max-cpu-loras"),
        (["--delay-s", "-1"], "--delay-s"),
        (["--block-size", "zero"], "--block-size"),
        (["--port", "70000"], "--port"),
        (["--later-version", "3"], "--later-gen-token-s"),  # one of the two alone
        (["--later-gen-token-s", "1"], "--later-gen-token-s"),
    ],
)
def test_a_bad_value_exits_2_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from replica_entry.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--backend", "sim", *argv])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def test_a_misspelled_backend_lists_every_backend(capsys: pytest.CaptureFixture[str]) -> None:
    # `--backend vllm` is dispatched before this parser, to replica_entry.vllm_backend; a typo
    # reaches it, and must not hide vllm (the choices once read "choose from 'sim'").
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--backend", "vlm"])
    assert exc.value.code == 2
    assert "invalid choice: 'vlm' (choose from 'sim', 'vllm')" in capsys.readouterr().err


READY = re.compile(r"^replica ready on (http://[\d.]+:\d+) \(model (\S+)\)$")


@asynccontextmanager
async def replica_process(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "replica_entry",
        "--backend",
        "sim",
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        match = READY.match(line.decode().strip())
        assert match, line
        yield process, match.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_the_replica_serves_until_signalled_then_exits_0(
    http: aiohttp.ClientSession, signum: signal.Signals
) -> None:
    async with replica_process("--model", "cli-model", "--block-size", "32") as (process, url):
        async with http.get(url + "/health") as response:
            assert response.status == 200
        async with http.get(url + "/v1/models") as response:
            assert (await response.json())["data"][0]["id"] == "cli-model"
        process.send_signal(signum)
        assert await asyncio.wait_for(process.wait(), 30) == 0
