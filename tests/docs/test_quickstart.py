"""The local fleets the README and the docs show, run as written: each block annotated
``<!-- run-by: tests/docs/test_quickstart.py -->`` goes to bash as it is, its ports moved to free
ones, the console scripts pointing at this checkout. It must end by itself with exit 0, its
completion answered, the proxy's headers and ``top`` showing both replicas; whatever it left
running is stopped afterwards (its process group, started here)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from docsgen.parsers import SCRIPTS
from replica_entry.sim.loopback import free_port
from tests.support.docs import ROOT, Block, blocks, doc_files

RUN_BY = "tests/docs/test_quickstart.py"
TIMEOUT_S = 60


def _blocks() -> list[Block]:
    return [
        block
        for path in doc_files()
        for block in blocks(path)
        if block.note == "run-by" and block.reason == RUN_BY
    ]


def _bin(tmp_path: Path) -> Path:
    """Console scripts (and ``python``) that run this checkout with this interpreter."""
    folder = tmp_path / "bin"
    folder.mkdir()
    programs = {name: f'exec {sys.executable} -m {module} "$@"' for name, module in SCRIPTS.items()}
    programs["python"] = f'exec {sys.executable} "$@"'
    for name, line in programs.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{line}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def _moved(body: str) -> str:
    """The block with every port it listens on (``--port N``) moved to a free one."""
    for port in sorted(set(re.findall(r"--port (\d+)", body))):
        body = re.sub(rf"\b{port}\b", str(free_port()), body)
    return body


def test_the_docs_show_a_local_fleet_to_run() -> None:
    where = {block.path.relative_to(ROOT).as_posix() for block in _blocks()}
    assert "README.md" in where


@pytest.mark.timeout(TIMEOUT_S * 2)
@pytest.mark.parametrize("block", _blocks(), ids=lambda b: b.where)
def test_the_local_fleet_runs_as_written(block: Block, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROXY_", "VLLM_API_KEY"))}
    env["PATH"] = f"{_bin(tmp_path)}{os.pathsep}{env['PATH']}"
    with subprocess.Popen(
        ["bash", "-e", "-c", _moved(block.body)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: what it leaves running is stopped below
    ) as shell:
        try:
            out, _ = shell.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGTERM)
            out, _ = shell.communicate(timeout=10)
            pytest.fail(f"{block.where} did not end within {TIMEOUT_S} s:\n{out}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGTERM)
    assert shell.returncode == 0, out
    assert '"choices"' in out, out  # the completion, answered through the proxy
    assert "replicas 2/2 routable" in out, out  # top, through the same proxy
    if "X-Rollout" in block.body:
        assert re.search(r"X-Rollout-Replica: 127\.0\.0\.1:\d+", out), out
        assert re.search(r"X-Rollout-Route: \w+", out), out
