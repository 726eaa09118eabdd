"""``examples/proxy.toml``, the config file a user copies, loads through the real settings loader
(flags, environment, file) with the command line its header shows, and is what it says it is:
the proxy job ``rollout-deploy up --topology job`` launches (the replicas at deploy's alias, the
adapters and the state under deploy's mount), so it cannot drift from deploy's plan."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from deploy.cli import Runtime
from deploy.cli import main as deploy_main
from proxy.cli import load_settings
from proxy.config import Settings
from tests.support.clock import SteppingClock

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "proxy.toml"
PREFIX = "run-1-0a1b2c-"  # what HF Jobs sets HF_NETWORK_GROUP_PREFIX to, for the test


def _expanded(words: list[str]) -> list[str]:
    """The words as the job's shell passes them (its network group prefix expanded)."""
    return [w.replace("${HF_NETWORK_GROUP_PREFIX}", PREFIX) for w in words]


def _header_command() -> list[str]:
    """The flags of the ``rollout-proxy --config examples/proxy.toml ...`` line of its header."""
    found = re.search(
        r"^#\s+rollout-proxy (--config examples/proxy\.toml.*)$", EXAMPLE.read_text(), re.M
    )
    assert found, "examples/proxy.toml's header shows no rollout-proxy command"
    words = _expanded(shlex.split(found[1]))
    words[words.index("--config") + 1] = str(EXAMPLE)
    return words


def _deploys_proxy_job() -> Settings:
    """The settings of the proxy job ``rollout-deploy up --topology job --run-name run-1`` plans."""
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=SteppingClock(), token=lambda: None, out=out, err=err)
    argv = [
        *("up", "--hub-endpoint", "http://127.0.0.1:9", "--bucket", "team/rl", "--model", "m"),
        *("--replica-count", "2", "--topology", "job", "--run-name", "run-1", "--dry-run"),
        *("--", "--dataset", "d.jsonl"),
    ]
    assert deploy_main(argv, runtime) == 0, err.getvalue()
    (job,) = [spec for spec in json.loads(out.getvalue()) if spec["role"] == "proxy"]
    words = shlex.split(job["command"][-1].split("-m proxy", 1)[1])
    return load_settings(_expanded(words))


@pytest.fixture(autouse=True)
def _no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("PROXY_")]:
        monkeypatch.delenv(name)


def test_the_example_config_loads_with_its_values() -> None:
    settings = load_settings(_header_command())
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)
    assert settings.discover == f"dns:{PREFIX}replica:8000"
    assert settings.limits.max_inflight_per_replica == 128
    assert settings.limits.queue_timeout_s == 60
    assert settings.policy.kind == "prefix"
    assert settings.adapters.dir == Path("/lora/run-1/.vllm_lora")
    assert settings.adapters.push is True


def test_the_example_is_the_proxy_job_deploy_launches() -> None:
    example, planned = load_settings(_header_command()), _deploys_proxy_job()
    assert example.discover == planned.discover  # deploy's alias, resolved as in the job
    assert example.adapters.dir == planned.adapters.dir  # under deploy's mount, /lora
    assert example.adapters.state_dir == planned.adapters.state_dir
    assert example.adapters.push == planned.adapters.push
    assert (example.host, example.port, example.supervise) == (
        planned.host,
        planned.port,
        planned.supervise,
    )


def test_a_flag_still_beats_the_example_file() -> None:
    settings = load_settings([*_header_command(), "--port", "8100"])
    assert settings.port == 8100 and settings.host == "0.0.0.0"
