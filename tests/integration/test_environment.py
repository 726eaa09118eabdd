"""A developer's exported ``PROXY_*`` variables reach no test: not the settings a stack is built
from, not a fixture of module scope, not a child process (``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.config import Settings

ROOT = Path(__file__).resolve().parents[2]
EXPORTED = {"PROXY_API_KEY": "x", "PROXY_POLICY": "bogus", "PROXY_PORT": "1"}


@pytest.fixture(scope="module")
def module_settings() -> Settings:
    return Settings()


def test_settings_and_children_see_no_proxy_variable(module_settings: Settings) -> None:
    for settings in (module_settings, Settings()):
        assert settings.api_key is None
        assert settings.policy.kind == "prefix"
        assert settings.port == 8000
    show = "import os; print([name for name in os.environ if name.startswith('PROXY_')])"
    child = subprocess.run(
        [sys.executable, "-c", show],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert child.stdout.strip() == "[]"


def test_a_run_with_proxy_variables_exported_is_unchanged_by_them() -> None:
    """The test above, in a pytest run of its own with ``EXPORTED`` in its environment (without
    the fixtures it fails: a bogus policy, a key, a port)."""
    node = f"{Path(__file__).relative_to(ROOT)}::test_settings_and_children_see_no_proxy_variable"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        cwd=ROOT,
        env={**os.environ, **EXPORTED},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout
