"""No tracked file cites a document the repository does not hold: ``REFERENCE.md``,
``DESIGN.md`` and ``STYLE.md`` were working notes outside it, so a reader following such a
citation from a benchmark's output or a docstring finds nothing. Cite a file in the repository
or the public source (the write-up, TRL's or vLLM's file) instead."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MISSING = re.compile(rb"\b(REFERENCE|DESIGN|STYLE)\.md\b")


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_no_tracked_file_outside_tests_cites_a_missing_document() -> None:
    files = [p for p in tracked_files() if p.relative_to(ROOT).parts[0] != "tests"]
    assert len(files) > 50  # git answered: the walk saw the repository
    citing = [
        f"{p.relative_to(ROOT)}: {m.group().decode()}"
        for p in files
        if p.is_file()
        for m in [MISSING.search(p.read_bytes())]
        if m
    ]
    assert citing == []
