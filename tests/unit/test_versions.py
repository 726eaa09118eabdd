"""``--version`` on all five programs (``python -m benchmarks --version`` once failed: its suite
was required first), each printing the installed distribution's version, read from its metadata
by one helper (``proxy.config.programs.version_flag``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import proxy
from tests.support.programs import MODULES, PARSERS, walk

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("program", "module"), MODULES.items())
def test_every_program_says_its_version(program: str, module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"{program} {version('rollout-proxy')}\n"


@pytest.mark.parametrize("program", PARSERS)
def test_every_parser_has_the_one_version_flag(
    program: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The programs' subcommands with flags of their own too (``python -m benchmarks fleet``,
    ``rollout-proxy top``)."""
    parser = PARSERS[program]()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._VersionAction)]
    assert action.version is not None and action.version.endswith(f" {proxy.__version__}")
    assert proxy.__version__ == version("rollout-proxy")
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == action.version + "\n"


def test_a_subcommand_says_the_programs_name() -> None:
    top = next(a for a in PARSERS["rollout-proxy top"]()._actions if a.dest == "version")
    assert isinstance(top, argparse._VersionAction)
    assert top.version == f"rollout-proxy {proxy.__version__}"
    (deploy_version,) = [
        a.version
        for parser in walk(PARSERS["rollout-deploy"]())
        for a in parser._actions
        if isinstance(a, argparse._VersionAction)
    ]
    assert deploy_version == f"rollout-deploy {proxy.__version__}"
    fleet = next(a for a in PARSERS["python -m benchmarks fleet"]()._actions if a.dest == "version")
    assert isinstance(fleet, argparse._VersionAction)
    assert fleet.version == f"python -m benchmarks {proxy.__version__}"
