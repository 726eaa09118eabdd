"""The mkdocs hook (``mkdocs.yml``: ``hooks: [docsgen/hooks.py]``): the generated reference pages,
the mirrored repository files and the vendored scripts and fonts (``docsgen.vendor``, at
``assets/vendor/``) go into the build, and every page's links are pointed at the site's copies
(``docsgen.mirror``). mkdocs then checks every link, anchor and nav entry
(``strict``, ``validation`` in mkdocs.yml).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # mkdocs loads a hook by its path; the project's packages too
    sys.path.insert(0, str(ROOT))

from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402
from mkdocs.structure.pages import Page  # noqa: E402

from docsgen import (  # noqa: E402
    cli_pages,
    error_pages,
    metric_pages,
    mirror,
    monitoring_pages,
    vendor,
)


def _nav_paths(node: Any) -> list[str]:
    if isinstance(node, str):
        return [] if "://" in node else [node]
    if isinstance(node, dict):
        return [path for value in node.values() for path in _nav_paths(value)]
    if isinstance(node, list):
        return [path for item in node for path in _nav_paths(item)]
    return []


def generated_pages() -> dict[str, str]:
    """src_uri -> Markdown of every generated reference page."""
    pages = {page.path: cli_pages.render(page) for page in cli_pages.PAGES}
    pages["reference/metrics.md"] = metric_pages.render()
    pages["reference/errors.md"] = error_pages.render()
    pages["reference/monitoring.md"] = monitoring_pages.render()
    return pages


def _add(files: Files, made: File) -> None:
    if files.get_file_from_path(made.src_uri) is not None:
        raise ValueError(f"{made.src_uri}: generated or mirrored, and also a file under docs/")
    files.append(made)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    pages = {
        f"{mirror.DOCS}/{f.src_uri}": Path(f.abs_src_path).read_text()
        for f in files.documentation_pages()
        if f.abs_src_path is not None
    }
    for src_uri, content in generated_pages().items():
        _add(files, File.generated(config, src_uri, content=content))
        pages[f"{mirror.DOCS}/{src_uri}"] = content
    # The home page is the README, as GitHub shows it (its links point into docs/).
    _add(files, File.generated(config, "index.md", abs_src_path=str(ROOT / mirror.HOME)))
    pages[mirror.HOME] = (ROOT / mirror.HOME).read_text()
    tracked = mirror.tracked()
    for path in sorted(mirror.wanted(pages, _nav_paths(config.nav), tracked)):
        _add(files, File.generated(config, path, abs_src_path=str(ROOT / path)))
    for path in vendor.files():
        source = str(vendor.FOLDER / path)
        _add(files, File.generated(config, f"{vendor.SITE_PATH}/{path}", abs_src_path=source))
    return files


def _repo_path(page: Page) -> str:
    source = page.file.abs_src_path
    if source is None:  # a generated reference page
        return f"{mirror.DOCS}/{page.file.src_uri}"
    return Path(source).resolve().relative_to(ROOT).as_posix()


_TABLE = re.compile(r"<table>.*?</table>", re.S)
_NAME = re.compile(r"<code>([^<\s]+)</code>")
# Where a name may break: after a list's comma, a path's slash, a test id's "::" and a dotted
# path's dot (one before a letter: never inside a number). Never at "-" or "_".
_BREAKS = re.compile(r"(?<=[,/])(?=.)|(?<=::)(?=.)|(?<=\.)(?=[A-Za-z_])")


def mark_names(html: str) -> str:
    """Each code span of a table without a space in it (a flag, a variable, a metric, a file,
    a list of choices) marked ``class="name"``, its parts between the places it may break each
    in a ``<span>`` that ``docs/assets/site.css`` keeps on one line, a ``<wbr>`` between them:
    a name is never broken inside a word (``PROXY_SHUTDOW`` / ``N_TIMEOUT``), and nothing is
    added to the text a reader copies."""

    def name(found: re.Match[str]) -> str:
        parts = "<wbr>".join(f"<span>{part}</span>" for part in _BREAKS.split(found[1]))
        return f'<code class="name">{parts}</code>'

    return _TABLE.sub(lambda table: _NAME.sub(name, table[0]), html)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return mark_names(html)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return mirror.rewrite(markdown, _repo_path(page))
