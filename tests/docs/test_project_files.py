"""The files a user expects of a project: the license pyproject.toml names, in full; a changelog
whose newest release is the version; the version written in one place (pyproject.toml), which
the programs read from the installed package; quiet installs that are quiet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

from proxy import __version__
from tests.support.docs import ROOT, section, table_first_cells

# A run's recorded environment names the version it ran (benchmarks/results/*.json): history,
# not a second source. The changelog names every version by design.
MAY_NAME_THE_VERSION = ("pyproject.toml", "CHANGELOG.md", "benchmarks/results/")


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project: dict[str, object] = tomllib.load(handle)["project"]
    return project


def test_the_license_is_the_full_text_pyproject_names() -> None:
    assert _project()["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "9. Accepting Warranty or Additional Liability." in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_an_unreleased_section_and_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert versions[0] == "Unreleased"
    assert versions[1] == _project()["version"], "the newest release is pyproject.toml's version"


def test_the_programs_report_the_version_of_pyproject() -> None:
    assert __version__ == _project()["version"]


def test_no_other_file_writes_the_version() -> None:
    version = str(_project()["version"])
    listed = subprocess.run(
        ["git", "grep", "-l", "-F", version], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert listed, "git grep found not even pyproject.toml"
    assert [path for path in listed if not path.startswith(MAY_NAME_THE_VERSION)] == []


def test_the_readmes_extras_table_lists_every_extra() -> None:
    install = section("README.md", "Install")
    listed = {
        name for cell in table_first_cells(install) for name in re.findall(r"`([\w-]+)`", cell)
    }
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert listed == set(extras)


def test_the_dockerfile_copies_every_package_the_project_ships() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        found = tomllib.load(handle)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in found}
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.M))
    assert copied == packages
    assert re.search(r"^COPY pyproject\.toml README\.md LICENSE \./$", dockerfile, re.M)


README_MAX_LINES = 250  # a quickstart; the manual is the site under docs/


def test_the_readme_is_a_quickstart_that_links_the_site() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, "move the detail into docs/"
    for heading in ("make demo", "make test", "rehearse", "HF Jobs", "tiny_model"):
        assert heading in text, f"the quickstart lost {heading!r}"
    assert "docs/" in text


def test_the_quiet_installs_drop_setuptools_editable_notice_and_nothing_else() -> None:
    """``make venv``, ``make e2e-venv`` and ``make hub-floor`` ran pip quietly but printed
    setuptools' "Editable installation" block, a warning of the build backend pip passes on.
    Each editable install runs under the Makefile's ``EDITABLE`` filter, which a Python given it
    applies to that warning's message alone: another warning still shows."""
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if re.search(r"pip install .*-e ", line)]
    assert len(installs) == 3 and all("$(EDITABLE)" in line for line in installs), installs
    found = re.search(r'^EDITABLE := PYTHONWARNINGS="([^"]+)"$', makefile, re.M)
    assert found, "the Makefile defines no EDITABLE filter"
    warn = (
        "import warnings; "
        "warnings.warn('Editable installation.\\n!!\\n  careful...', UserWarning); "
        "warnings.warn('a build backend warning of any other kind', UserWarning)"
    )
    done = subprocess.run(
        [sys.executable, "-c", warn],
        env={**os.environ, "PYTHONWARNINGS": found[1]},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "Editable installation" not in done.stderr
    assert "a build backend warning of any other kind" in done.stderr
