"""The shape of ``proxy/``: its import rules, small modules, few modules at the top.

The import rules are import-linter contracts in pyproject.toml (``[tool.importlinter]``): the
rooms' layers, no import cycle in any package, and the narrower rules some package docstrings
state. ``make lint`` checks them; the test below checks them too, so ``pytest`` alone does.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "proxy"
MAX_LINES = 400
MAX_TOP_MODULES = 10


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_import_contracts_hold() -> None:
    # A child process: import-linter reconfigures logging in the process it runs in.
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_over_the_line_limit(name: str) -> None:
    lines = len(_modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (limit {MAX_LINES}): split it"


def test_few_modules_directly_in_proxy() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_every_package_says_what_it_holds_and_may_import() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc and len(doc) > 100, f"{init} needs a docstring: contents, rules"
