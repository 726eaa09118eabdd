"""The repository's own files in the site, at their repository paths.

The pages under ``docs/`` link to the rest of the repository as GitHub shows it: a relative
link that leaves ``docs/`` (``../SECURITY.md``, ``../benchmarks/results/learn_reward.png``). The
site holds every such file at its repository path (``SECURITY.md``, ``benchmarks/results/...``)
and each link is rewritten to it, so the same Markdown reads right on GitHub and in the site,
and a link to a file the repository does not hold stays broken and fails the strict build.
A mirrored page's own links are followed the same way (``benchmarks/README.md`` links
``fleet/README.md``). Only the repository's files are mirrored (git's, ignored ones left out);
the root README is the site's home page, ``index.md``, its links rewritten the same way
(``docs/trainer.md`` -> ``trainer.md``).
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs"
HOME = "README.md"  # GitHub's front page is the site's home, index.md (docsgen.hooks)

# An inline link or image target: ](target) or ](target "title"); code is cut out first.
_LINK = re.compile(r"(\]\()(<[^>]*>|[^)\s]+)((?:\s+\"[^\"]*\")?\))")
_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def tracked() -> set[str]:
    """The repository's files: those git tracks, and new ones it does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return {name for name in listed.decode().split("\0") if name}


def _outside_code(markdown: str, change: Callable[[str], str]) -> str:
    """``markdown`` with ``change`` applied to the text outside fences and code spans."""
    out, last = [], 0
    spans = [m.span() for m in _FENCE.finditer(markdown)]
    for start, end in spans:
        out.append(_spans_kept(markdown[last:start], change))
        out.append(markdown[start:end])
        last = end
    out.append(_spans_kept(markdown[last:], change))
    return "".join(out)


def _spans_kept(text: str, change: Callable[[str], str]) -> str:
    out, last = [], 0
    for found in _CODE_SPAN.finditer(text):
        out.append(change(text[last : found.start()]))
        out.append(found.group())
        last = found.end()
    out.append(change(text[last:]))
    return "".join(out)


def _split(target: str) -> tuple[str, str]:
    """``path#anchor`` -> (path, ``#anchor``); external and page-local targets: ("", target)."""
    if "://" in target or target.startswith(("#", "mailto:", "/")):
        return "", target
    path, hash_, anchor = target.partition("#")
    return path, hash_ + anchor


def links(markdown: str) -> Iterator[str]:
    """The relative link targets of ``markdown`` (paths only, code left out)."""
    found: list[str] = []

    def collect(text: str) -> str:
        for match in _LINK.finditer(text):
            path, _ = _split(match.group(2).strip("<>"))
            if path:
                found.append(path)
        return text

    _outside_code(markdown, collect)
    yield from found


def repo_path(page_repo_path: str, target: str) -> str:
    """The repository path a link from the page at ``page_repo_path`` points at."""
    return posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), target))


def site_path(repo: str) -> str:
    """Where a repository file lives in the site's sources: docs/ stripped, the README as the
    home page, others as they are."""
    if repo == HOME:
        return "index.md"
    return repo[len(DOCS) + 1 :] if repo.startswith(DOCS + "/") else repo


def wanted(pages: dict[str, str], nav: Iterable[str], files: set[str]) -> set[str]:
    """Repository files to mirror: those ``nav`` names that docs/ lacks, and every tracked file
    a page links to outside docs/, followed through the mirrored pages' own links.

    ``pages``: repository path -> Markdown of each page under docs/."""
    todo = [path for path in nav if f"{DOCS}/{path}" not in files and path in files]
    todo += [repo_path(page, target) for page, text in pages.items() for target in links(text)]
    found: set[str] = set()
    while todo:
        path = todo.pop()
        if path in found or path.startswith(DOCS + "/") or path not in files:
            continue
        if path == HOME:
            continue
        found.add(path)
        if path.endswith(".md"):
            text = (ROOT / path).read_text()
            todo += [repo_path(path, target) for target in links(text)]
    return found


def rewrite(markdown: str, page_repo_path: str) -> str:
    """Each relative link of the page at ``page_repo_path`` pointed at its file in the site."""
    here = posixpath.dirname(site_path(page_repo_path))

    def change(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            raw = match.group(2)
            path, anchor = _split(raw.strip("<>"))
            if not path:
                return match.group()
            target = site_path(repo_path(page_repo_path, path))
            relative = posixpath.relpath(target, here or ".")
            return f"{match.group(1)}{relative}{anchor}{match.group(3)}"

        return _LINK.sub(one, text)

    return _outside_code(markdown, change)
