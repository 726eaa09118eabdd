"""The commands the README shows, as a user would copy them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def deploy_commands(subcommand: str, in_section: str | None = None) -> list[list[str]]:
    """The arguments after ``python -m deploy SUBCOMMAND`` of every such command in a bash
    block (of the README's ``## in_section`` when given), in order (continuation lines joined,
    comments dropped)."""
    commands = []
    text = README.read_text() if in_section is None else section(in_section)
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#")[0].strip()
            if line.startswith(f"python -m deploy {subcommand} "):
                commands.append(shlex.split(line)[4:])
    return commands


def section(title: str) -> str:
    """The text of the README's ``## title`` section, up to the next ``## `` heading."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README.read_text(), re.S | re.M)
    assert found, f"README.md has no section '## {title}'"
    return found.group(1)


def table_first_cells(text: str) -> list[str]:
    """The first cell of every row of the Markdown tables in ``text`` (header rows included)."""
    return [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("|")]
