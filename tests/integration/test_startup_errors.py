"""Every start-up failure of the five entry points (``python -m proxy``, ``replica_entry``,
``trainer_entry``, ``deploy``, ``benchmarks``) is one line, two with a hint at most, and a
non-zero exit code: no traceback, no "Unclosed client session", no asyncio noise. Each case runs
the entry point as a user would (``sys.executable -m ...``, this checkout's modules) against
what a newcomer gets wrong: a port in use, a file where a directory belongs, a path that is not
there, a URL the proxy refuses, a Hub that does not have the model or cannot be reached.

The trainer's cases run without torch: its inputs are checked before anything heavy is imported
(``trainer_entry.inputs``), so a case that passes its inputs ends at the missing extra instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.background import BackgroundServers
from trainer_entry import sidecar
from trainer_entry.inputs import BadInput, check_hub
from trainer_entry.options import Topology, TrainerOptions

ROOT = Path(__file__).resolve().parents[2]
NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): an address of no machine here


@dataclass(frozen=True)
class Place:
    """What the cases point at: a file, a taken port, a free one, a tiny model and dataset."""

    tmp: Path
    file: Path
    taken: int
    free: int
    model: Path
    data: Path
    closed: str  # an endpoint nothing listens on

    def fill(self, argv: tuple[str, ...]) -> list[str]:
        values = {"file": self.file, "taken": self.taken, "free": self.free, "tmp": self.tmp,
                  "model": self.model, "data": self.data}  # fmt: skip
        return [word.format(**values) for word in argv]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Place]:
    tmp = tmp_path_factory.mktemp("startup")
    afile = tmp / "afile"
    afile.write_text("not a directory\n")
    model, data = tmp / "model", tmp / "math.jsonl"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        yield Place(tmp, afile, port, _free_port(), model, data, f"http://127.0.0.1:{_free_port()}")


def run(place: Place, argv: tuple[str, ...], **env: str) -> subprocess.CompletedProcess[str]:
    """The entry point as a user runs it, with a Hub cache and token of its own."""
    environ = {**os.environ, "HF_HOME": str(place.tmp / "hf-home"), **env}
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PROXY_UPSTREAM_TOKEN"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, *place.fill(argv)],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def assert_one_line(result: subprocess.CompletedProcess[str], *says: str) -> str:
    """Exit code not 0, one line (a second with the hint at most) and nothing else: returns it."""
    text = result.stdout + result.stderr
    lines = [line for line in text.splitlines() if line.strip()]
    assert result.returncode != 0, text
    assert 1 <= len(lines) <= 2, text
    assert "Traceback" not in text and "Unclosed" not in text, text
    for words in says:
        assert words in text, text
    return text


TRAINER = ("-m", "trainer_entry", "--output-dir", "{tmp}/run")
SIDECAR = ("--replica-urls", "http://127.0.0.1:9")
LOCAL = ("--model", "{model}", "--dataset", "{data}")

PROXY = ("-m", "proxy", "--replica-urls", "http://127.0.0.1:9", "--port", "0")
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (argv, what the line says)
    "proxy port in use": (
        ("-m", "proxy", "--replica-urls", "http://127.0.0.1:9", "--port", "{taken}"),
        ("cannot listen on 127.0.0.1:", "address already in use", "pick another --port"),
    ),
    "proxy adapter store a file": (
        (*PROXY, "--adapter-store", "{file}"),
        ("rollout-proxy: adapter store refused: ", "is not a directory", "(--adapter-store)"),
    ),
    "proxy adapter store under a file": (
        (*PROXY, "--adapter-store", "{file}/store"),
        ("adapter store refused: ", "lies under a file", "(--adapter-store)"),
    ),
    "proxy state dir a file": (
        (*PROXY, "--state-dir", "{file}"),
        ("rollout-proxy: --state-dir ", "is a file, not a directory"),
    ),
    "proxy adapters dir under a file": (
        (*PROXY, "--adapters-dir", "{file}/versions"),
        ("rollout-proxy: --adapters-dir ", "is a file, not a directory"),
    ),
    "proxy adapters mirror a file": (
        (*PROXY, "--adapters-local", "{tmp}/local", "--adapters-mirror", "{file}"),
        ("rollout-proxy: --adapters-mirror ", "is a file, not a directory"),
    ),
    "sim replica port in use": (
        ("-m", "replica_entry", "--backend", "sim", "--port", "{taken}"),
        ("rollout-replica: cannot listen", "another replica running? pick another --port"),
    ),
    "sim replica adapter store a file": (
        ("-m", "replica_entry", "--backend", "sim", "--port", "0", "--adapter-store", "{file}"),
        ("rollout-replica: adapter store refused: ", "(--adapter-store)"),
    ),
    "sim replica host not of this machine": (
        ("-m", "replica_entry", "--backend", "sim", "--port", "0", "--host", NOT_HERE),
        ("cannot listen", "--host must be an address of this machine"),
    ),
    "vllm replica port in use": (
        ("-m", "replica_entry", "--backend", "vllm", "--model", "{model}", "--port", "{taken}"),
        ("rollout-replica: cannot listen", "address already in use"),
    ),
    "vllm replica model not there": (
        ("-m", "replica_entry", "--backend", "vllm", "--model", "./nothere", "--port", "{free}"),
        ("rollout-replica: --model ./nothere: no such directory here, and not a Hub id",),
    ),
    "vllm replica adapter store a file": (
        (
            "-m",
            "replica_entry",
            "--backend",
            "vllm",
            "--model",
            "{model}",
            "--port",
            "{free}",
            "--adapter-store",
            "{file}",
        ),
        ("adapter store refused", "(--adapter-store)"),
    ),
    "trainer dataset not there": (
        (*TRAINER, *SIDECAR, "--model", "{model}", "--dataset", "nothere.jsonl"),
        ("rollout-trainer: --dataset nothere.jsonl: no such file here",),
    ),
    "trainer model not there": (
        (*TRAINER, *SIDECAR, "--model", "./nothere", "--dataset", "{data}"),
        ("rollout-trainer: --model ./nothere: no such directory here, and not a Hub id",),
    ),
    "trainer model a file": (
        (*TRAINER, *SIDECAR, "--model", "{file}", "--dataset", "{data}"),
        ("--model", "a file; name the model's directory or a Hub id"),
    ),
    "trainer output dir under a file": (
        ("-m", "trainer_entry", *LOCAL, *SIDECAR, "--output-dir", "{file}/run"),
        ("rollout-trainer: --output-dir", "is a file, not a directory"),
    ),
    "trainer adapters dir a file": (
        (*TRAINER, *LOCAL, *SIDECAR, "--adapters-local", "{file}"),
        ("rollout-trainer: --adapters-local", "is a file, not a directory"),
    ),
    "trainer replica URL the sidecar refuses": (
        (*TRAINER, *LOCAL, "--replica-urls", "ftp://replica:8000"),
        ("argument --replica-urls: replica URL 'ftp://replica:8000' must look like",),
    ),
    "trainer proxy URL the relay refuses": (
        (*TRAINER, *LOCAL, "--proxy-url", "proxy:8000"),
        ("argument --proxy-url: replica URL 'proxy:8000' must look like http://HOST:PORT",),
    ),
    "trainer sidecar port in use": (
        (*TRAINER, *LOCAL, *SIDECAR, "--sidecar-port", "{taken}"),
        ("rollout-trainer: --sidecar-port: cannot listen", "address already in use"),
    ),
    "trainer response template not there": (
        (*TRAINER, *LOCAL, *SIDECAR, "--response-template", "nothere.json"),
        ("--response-template nothere.json: neither chatml nor llama3 nor a JSON file",),
    ),
    "trainer dataset not JSON lines": (
        (*TRAINER, *SIDECAR, "--model", "{model}", "--dataset", "{tmp}/bad.jsonl"),
        ("its first row is not JSON", "one JSON object per line"),
    ),
    # Once found after the proxy started and TRL was imported (64 s); torch is not even needed
    # to be told (without the check, this case would end at the missing extra instead).
    "trainer dataset without the prompt column": (
        (*TRAINER, *SIDECAR, "--model", "{model}", "--dataset", "{tmp}/questions.jsonl"),
        ("--dataset", "no column 'prompt' (it has question, answer)", "--prompt-column"),
    ),
    "benchmarks unknown suite": (
        ("-m", "benchmarks", "nosuite"),
        ("python -m benchmarks: error: argument suite: invalid choice",),
    ),
    "benchmarks replicas that do not answer": (
        ("-m", "benchmarks", "overhead", "--replica-urls", "http://127.0.0.1:{free}"),
        (
            "argument --replica-urls: http://127.0.0.1:",
            "does not answer",
            "start the replicas first",
        ),
    ),
    "benchmarks json under a file": (
        ("-m", "benchmarks", "routing", "--quick", "--json", "{file}/out.json"),
        ("--json", "is a file, not a directory"),
    ),
    "benchmarks learn work dir a file": (
        ("-m", "benchmarks", "learn", "--workdir", "{file}"),
        ("--workdir", "is a file, not a directory"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_start_up_failure_is_one_line_and_an_exit_code(place: Place, case: str) -> None:
    argv, says = CASES[case]
    (place.tmp / "bad.jsonl").write_text("prompt,answer\n1+1,2\n")
    (place.tmp / "questions.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    assert_one_line(run(place, argv), *says)


def test_a_hub_id_without_network_is_said_in_seconds(place: Place) -> None:
    argv = (*TRAINER, *SIDECAR, "--model", "Qwen/Qwen2.5-0.5B", "--dataset", "{data}")
    started = time.monotonic()
    result = run(place, argv, HF_ENDPOINT=place.closed)
    text = assert_one_line(result, "--model Qwen/Qwen2.5-0.5B: the Hub", "cannot be reached")
    assert "a network failure" in text and time.monotonic() - started < 15


def test_offline_a_hub_id_must_be_in_the_cache(place: Place) -> None:
    argv = (*TRAINER, *SIDECAR, "--model", "Qwen/Qwen2.5-0.5B", "--dataset", "{data}")
    assert_one_line(run(place, argv, HF_HUB_OFFLINE="1"), "not in this machine's Hub cache")


def _hub_stand_in() -> web.Application:
    """The Hub's ``model_info``/``dataset_info``: ``org/there`` exists, ``org/gated`` is gated
    (403 GatedRepo), anything else is not found (404 RepoNotFound), as the Hub answers."""

    async def info(request: web.Request) -> web.Response:
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        if repo == "org/there":
            return web.json_response({"id": repo, "sha": "0" * 40, "siblings": []})
        code, status = ("GatedRepo", 403) if repo == "org/gated" else ("RepoNotFound", 404)
        return web.json_response({"error": code}, status=status, headers={"X-Error-Code": code})

    app = web.Application()
    app.router.add_get("/api/{kind:models|datasets}/{org}/{name}", info)
    return app


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    servers = BackgroundServers()
    try:
        yield servers.start(_hub_stand_in())
    finally:
        servers.close()


@pytest.mark.parametrize(
    ("model", "dataset", "says"),
    [
        ("org/missing", "{data}", "--model org/missing: no such model on the Hub"),
        ("org/gated", "{data}", "--model org/gated: a gated model on the Hub: ask for access"),
        ("{model}", "org/missing", "--dataset org/missing: no such dataset on the Hub"),
        # Both there: the inputs pass, and the run stops at the missing extra instead.
        pytest.param(
            "org/there",
            "org/there",
            "needs torch, trl and peft",
            marks=pytest.mark.skipif(find_spec("torch") is not None, reason="torch is here"),
        ),
    ],
)
def test_hub_ids_are_looked_up_before_anything_starts(
    place: Place, hub: str, model: str, dataset: str, says: str
) -> None:
    result = run(place, (*TRAINER, *SIDECAR, "--model", model, "--dataset", dataset),
                 HF_ENDPOINT=hub)  # fmt: skip
    assert_one_line(result, says)
    assert not (place.tmp / "run").exists()  # nothing was started or written


def test_deploy_without_network_says_so_in_seconds(place: Place) -> None:
    """Not 23 s of huggingface_hub's retries, and not the token's permissions."""
    started = time.monotonic()
    result = run(place, ("-m", "deploy", "status", "--run-name", "r1", "--namespace", "alice"),
                 HF_TOKEN="hf_not_a_real_token", HF_ENDPOINT=place.closed)  # fmt: skip
    text = assert_one_line(result, f"cannot reach the Hub at {place.closed}", "the network")
    assert "token can write" not in text and "hf_not_a_real_token" not in text
    assert time.monotonic() - started < 8


def test_a_local_proxy_that_will_not_start_is_one_error(place: Place) -> None:
    """What the trainer's launcher catches and says in one line (its exit 2), after the
    proxy's own line: the proxy's exit code, no ``RuntimeError`` traceback."""
    argv = [sys.executable, "-m", "proxy", "--replica-urls", "ftp://replica:8000", "--port", "0"]
    refused = pytest.raises(sidecar.ProxyNotReady, match="exited with code 2 before it was ready")
    with refused, sidecar.running(argv):
        pass


def test_a_hub_that_does_not_answer_runs_from_the_cache(
    place: Place, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Everything cached: one warning, and the ranks run offline (not minutes of retries)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "ENDPOINT", place.closed)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    options = TrainerOptions(
        model="org/model", dataset=str(place.data), output_dir=tmp_path, topology=Topology()
    )
    with pytest.raises(BadInput, match=r"the Hub .* cannot be reached .*: a network failure"):
        check_hub(options, {})
    (tmp_path / "hub" / "models--org--model" / "snapshots").mkdir(parents=True)
    assert check_hub(options, {}) == {"HF_HUB_OFFLINE": "1"}
    assert "training from this machine's Hub cache (HF_HUB_OFFLINE=1 for the ranks)" in caplog.text


@pytest.mark.parametrize(
    ("status", "listing", "says"),
    [
        (404, b"", "/v1/models answered HTTP 404"),
        (200, b"<html>", "/v1/models answered something that is not JSON"),
        (200, b'{"data": []}', "/v1/models lists no model"),
    ],
)
def test_benchmarks_refuse_a_replica_url_that_lists_no_model(
    place: Place, status: int, listing: bytes, says: str
) -> None:
    """It answers /health, so it is up, but it is not a replica: said before a suite runs (the
    overhead suite read its model there, a traceback)."""

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(request: web.Request) -> web.Response:
        return web.Response(status=status, body=listing)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    servers = BackgroundServers()
    try:
        url = servers.start(app)
        result = run(place, ("-m", "benchmarks", "overhead", "--replica-urls", url))
    finally:
        servers.close()
    assert_one_line(result, "argument --replica-urls: ", says, "name a vLLM server")
