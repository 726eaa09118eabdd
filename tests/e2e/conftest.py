"""Fixtures of the end-to-end tier: the tiny model, a generated dataset, two real vLLM servers.

The servers are shared by the whole session (each takes ~40 s and ~3 GB to start); every test
begins with no adapter loaded on them. Without the heavy tier (``make e2e`` installs it) every
test here is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.shims import BaseShim
from tests.e2e.support import PYTHON, VllmServer, adapters_listed, heavy_tier_missing, post_json
from tests.support.background import BackgroundServers
from trainer_entry.sidecar import free_port

MAX_STALENESS = 2  # the single-run tests' TRL max_staleness (needs max_loras >= 4)
# The replicas' max_loras: two runs on one fleet (test_training_runs) get a share of 3 each,
# TRL's max_staleness 1 (a share of 2 would force staleness 0, where TRL unloads a version
# before its rollout worker has moved on from it).
MAX_LORAS = 6


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = heavy_tier_missing()
    for item in items:
        if "tests/e2e/" in item.nodeid:
            item.add_marker(pytest.mark.e2e)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model, a real LoRA adapter of it, and a 64-problem dataset."""
    root = tmp_path_factory.mktemp("tiny")
    model, adapter, data = root / "model", root / "adapter", root / "math.jsonl"
    subprocess.run(
        [PYTHON, "-m", "trainer_entry.tiny_model", str(model), "--adapter", str(adapter)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    subprocess.run(
        [PYTHON, "-m", "trainer_entry.math_data", str(data), "--rows", "64"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return {"model": model, "adapter": adapter, "data": data}


@pytest.fixture(scope="session")
def fleet(
    tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[VllmServer]]:
    logs = tmp_path_factory.mktemp("vllm-logs")
    # One core per replica, as one GPU per replica: each engine's OpenMP threads bound to its
    # own core. Unbound, each engine runs a thread per core and the two spin against each other
    # and the trainer; a load then waits out a contended engine step (TRL's sync median 0.59 s
    # against 0.36 s bound, in the training test on 2 cores).
    cores = sorted(os.sched_getaffinity(0))
    servers = [
        VllmServer(
            port=free_port(),
            model_dir=tiny["model"],
            log_path=logs / f"replica-{i}.log",
            max_staleness=MAX_STALENESS,
            max_loras=MAX_LORAS,
            threads_bind=str(cores[i % len(cores)]),
        )
        for i in range(2)
    ]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def clean_fleet(fleet: list[VllmServer]) -> list[VllmServer]:
    """The fleet with no adapter loaded (TRL numbers versions from 1 in every new run)."""
    for server in fleet:
        for name in adapters_listed(server.url):
            assert post_json(server.url + "/v1/unload_lora_adapter", {"lora_name": name}) == 200
    return fleet


@pytest.fixture
def shim() -> Iterator[tuple[BaseShim, BackgroundServers]]:
    servers = BackgroundServers()
    try:
        yield BaseShim(), servers
    finally:
        servers.close()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A rehearsal's folder: outside /tmp (every rehearsed job gets its own /tmp), removed
    afterwards."""
    path = Path(tempfile.mkdtemp(prefix="rehearsal-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
