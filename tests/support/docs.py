"""The documentation as a user reads it: its Markdown files, their fenced blocks with the
annotation before each, and the commands in a shell block as a shell would split them.

The files: README.md, every page under docs/, and every repository page the site shows
(``docsgen.mirror``: SECURITY.md, CHANGELOG.md, the other READMEs). A block's annotation is an
HTML comment on the line before its fence, invisible on GitHub and in the site:

- ``<!-- not-run: REASON -->``: the block holds what cannot run here (the Hub, a GPU, a running
  proxy, a command's output); a command of this project's in it is still checked in full;
- ``<!-- synopsis -->``: usage lines with placeholders (``SUITE``, ``[--quick]``, ``...``): each
  flag of this project's programs is checked to exist, nothing more;
- ``<!-- run-by: tests/docs/FILE.py -->``: the block is run as written by that test; it is
  checked here as a plain block is, other programs (``curl``) allowed.

A block without one is checked in full, and may hold nothing the checks do not know.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from docsgen import mirror

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(
    r"^(?P<fence>```|~~~)(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$", re.S | re.M
)
_NOTE = re.compile(r"<!--\s*(not-run|synopsis|run-by)\s*(?::\s*(.*?))?\s*-->\s*$")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's ``!!python/name:`` tags read as nothing (only its nav is wanted here)."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)


def nav_paths(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [path for value in node.values() for path in nav_paths(value)]
    if isinstance(node, list):
        return [path for item in node for path in nav_paths(item)]
    return []


def doc_files() -> list[Path]:
    """README.md, the pages under docs/, and the repository pages the site mirrors."""
    pages = {f"docs/{p.relative_to(ROOT / 'docs').as_posix()}": p.read_text()
             for p in sorted((ROOT / "docs").rglob("*.md"))}  # fmt: skip
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    linked = {**pages, mirror.HOME: (ROOT / mirror.HOME).read_text()}
    mirrored = mirror.wanted(linked, nav_paths(config["nav"]), mirror.tracked())
    found = [ROOT / "README.md", *(ROOT / path for path in pages)]
    found += [ROOT / path for path in sorted(mirrored) if path.endswith(".md")]
    return found


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    offset: int  # of the opening fence, in characters
    lang: str
    body: str
    note: str | None  # "not-run", "synopsis", "run-by" or None
    reason: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    text = path.read_text()
    for found in _FENCE.finditer(text):
        before = text[: found.start()].rstrip("\n").rsplit("\n", 1)[-1]
        note = _NOTE.search(before)
        yield Block(
            path,
            text.count("\n", 0, found.start()) + 1,
            found.start(),
            found.group("lang").lower(),
            found.group("body"),
            note.group(1) if note else None,
            (note.group(2) or "") if note else "",
        )


def prose(path: Path) -> str:
    """The file's text with its fenced blocks and HTML comments blanked (offsets kept)."""
    text = path.read_text()
    blank = lambda m: re.sub(r"[^\n]", " ", m.group())  # noqa: E731
    text = _FENCE.sub(blank, text)
    return re.sub(r"<!--.*?-->", blank, text, flags=re.S)


@dataclass(frozen=True)
class Command:
    words: list[str]  # the program and its arguments, environment assignments taken off
    env: dict[str, str]
    background: bool  # ended with `&`
    text: str  # the line as written, continuation lines joined


SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}


def commands(body: str, prompt_only: bool = False) -> Iterator[Command]:
    """The commands of a shell block: continuation lines joined, comments dropped, split at
    ``&&``, ``||``, ``;``, ``|``, ``&`` and parentheses. ``prompt_only``: only lines that begin
    with ``$ `` (a block that shows a session: commands and what they print)."""
    for raw in body.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if prompt_only:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token not in SEPARATORS:
                words.append(token)
                continue
            env = {}
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                name, _, value = words.pop(0).partition("=")
                env[name] = value
            if words:
                yield Command(words, env, token == "&", line)
            words = []


def section(page: str, title: str) -> str:
    """The text of ``page``'s (a path from the repository root) ``## title`` section, up to the
    next ``## `` heading."""
    text = (ROOT / page).read_text()
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert found, f"{page} has no section '## {title}'"
    return found.group(1)


def table_first_cells(text: str) -> list[str]:
    """The first cell of every row of the Markdown tables in ``text`` (header rows included)."""
    return [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("|")]


def deploy_commands(subcommand: str, page: str | None = None) -> list[list[str]]:
    """The arguments after ``python -m deploy SUBCOMMAND`` of every such command in a shell
    block of ``page`` (else of every documentation file), in order."""
    paths = [ROOT / page] if page is not None else doc_files()
    found = []
    for path in paths:
        for block in blocks(path):
            if block.lang not in ("bash", "sh", "shell"):
                continue
            for command in commands(block.body):
                words = command.words
                if words[:4] == ["python", "-m", "deploy", subcommand]:
                    found.append(words[4:])
    return found
