"""The site as ``make docs`` builds it, built once per run from the sources as they are now
(``built_site``): the offline browser check and the static checks of its pages read it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_S = 180  # mkdocs build of the whole site (about 3 s), plus the vendored files if missing


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    for command in (
        [sys.executable, "-m", "docsgen.vendor"],  # nothing to do after `make docs`
        [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(folder)],
    ):
        subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=BUILD_S)
    return folder
