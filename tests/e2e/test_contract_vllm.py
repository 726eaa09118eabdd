"""The contract suite, run against a real vLLM server instead of the simulated replica."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.e2e.support import PYTHON, REPLICA_TOKEN, VllmServer


def test_the_contract_suite_passes_against_real_vllm(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "CONTRACT_REPLICA_URL": clean_fleet[0].url,
        "CONTRACT_REPLICA_API_KEY": REPLICA_TOKEN,
        "CONTRACT_ADAPTER_TEMPLATE": str(tiny["adapter"]),
        "CONTRACT_ADAPTER_DIR": str(tmp_path),
    }
    run = subprocess.run(
        [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/contract"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-6000:]
