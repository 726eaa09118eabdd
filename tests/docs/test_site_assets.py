"""The parts of the site that keep it whole offline and readable, checked without a browser (the
browser check is ``test_site_offline.py``): no page links a script, stylesheet or font of
another host; the vendored files are the pinned ones and all there; a name in a table is split
only between its parts; no text is escaped twice."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from docsgen import cli_pages, hooks, vendor
from tests.support.docs import ROOT

# What a page loads (not what it links to): scripts, stylesheets, preconnects, icons, images.
_LOADS = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=\"([^\"]+)\"")


def test_no_page_loads_anything_from_another_host(built_site: Path) -> None:
    outside = {
        page.relative_to(built_site).as_posix(): found
        for page in sorted(built_site.rglob("*.html"))
        if (found := [u for u in _LOADS.findall(page.read_text()) if "//" in u.split("?")[0]])
    }
    assert outside == {}


def test_the_vendored_files_are_in_the_site_and_named_by_mkdocs_yml(built_site: Path) -> None:
    assert vendor.ready()
    shipped = vendor.files()
    assert {"mermaid.min.js", "fonts.css", "LICENSE-mermaid.txt"} <= set(shipped)
    for path in shipped:
        assert (built_site / vendor.SITE_PATH / path).is_file(), path
    fonts = (vendor.FOLDER / "fonts.css").read_text()
    urls = re.findall(r"url\(([^)]+)\)", fonts)
    assert len(urls) == 2 * len(vendor.SUBSETS) * sum(len(f.weights) for f in vendor.FONTS)
    assert all(f"fonts/{Path(url).name}" in shipped for url in urls)
    assert 'globalThis["mermaid"]' in (vendor.FOLDER / "mermaid.min.js").read_text()[-200:]
    config = (ROOT / "mkdocs.yml").read_text()
    config = yaml.safe_load(re.sub(r"!!python/name:\S+", "null", config))
    assert config["theme"]["font"] is False
    assert f"{vendor.SITE_PATH}/mermaid.min.js" in config["extra_javascript"]
    for sheet in config["extra_css"]:
        assert (built_site / sheet).is_file(), sheet


def test_the_pins_are_what_the_vendored_folder_was_made_from(built_site: Path) -> None:
    assert vendor.MERMAID.version.startswith("11.")  # Material's bundle asks for mermaid@11
    assert all(p.integrity.startswith("sha512-") for p in vendor.PACKAGES)
    assert (vendor.FOLDER / vendor.STAMP).read_text() == vendor.pins()


def test_a_name_in_a_table_is_split_only_between_its_parts() -> None:
    html = (
        "<p><code>PROXY_SHUTDOWN_TIMEOUT</code></p><table><tr>"
        "<td><code>PROXY_SHUTDOWN_TIMEOUT</code>, <code>--token-budget</code></td>"
        "<td><code>{prefix,least_loaded}</code> <code>&lt;tmp&gt;/a-b</code></td>"
        "<td><code>proxy.http.errors</code> <code>0.9</code> <code>a b</code></td>"
        "</tr></table>"
    )
    marked = hooks.mark_names(html)
    assert marked.startswith("<p><code>PROXY_SHUTDOWN_TIMEOUT</code></p>")  # outside a table
    assert '<code class="name"><span>PROXY_SHUTDOWN_TIMEOUT</span></code>' in marked
    assert '<code class="name"><span>--token-budget</span></code>' in marked
    assert "<span>{prefix,</span><wbr><span>least_loaded}</span>" in marked
    assert "<span>&lt;tmp&gt;/</span><wbr><span>a-b</span>" in marked
    assert "<span>proxy.</span><wbr><span>http.</span><wbr><span>errors</span>" in marked
    assert '<code class="name"><span>0.9</span></code>' in marked
    assert "<code>a b</code>" in marked  # code with a space wraps as Material wraps it
    assert re.sub(r"<[^>]+>", "", marked) == re.sub(r"<[^>]+>", "", html)  # the text unchanged


def test_no_page_shows_an_escape_as_text(built_site: Path) -> None:
    """``&lt;`` escaped once more reads ``&amp;lt;`` in the HTML: the reader sees ``&lt;run&gt;``
    where the source says ``<run>`` (the errors page did, issue 49)."""
    twice = {
        page.relative_to(built_site).as_posix(): found
        for page in sorted(built_site.rglob("*.html"))
        if (found := sorted(set(re.findall(r".{20}&amp;(?:lt|gt|amp);.{10}", page.read_text()))))
    }
    assert twice == {}


def test_a_table_cell_escapes_text_and_leaves_code_spans_as_written() -> None:
    cell = cli_pages.cell("under ``/runs/<run>/`` a | b <x> *y* and `a|<b>`")
    assert cell == r"under ``/runs/<run>/`` a \| b &lt;x&gt; \*y\* and `a|<b>`"
