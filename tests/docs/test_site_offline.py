"""The built site, whole offline, in a real browser (issue 49): the site is built from the
sources into a temporary folder, served on loopback, and every page is opened in headless
Chromium (``tests.support.browser``) with every request to another host refused and counted.

What it catches, page by page:

- a page that needs another host: a script, stylesheet or font from a CDN or Google Fonts, a
  worker's fetch (each such request is refused and named, with its page);
- a diagram that shows its raw source: mermaid missing or failing (Material's bundle then
  leaves the source block in place of the drawing), a drawing without its labels, or mermaid's
  error picture;
- search that never answers: the search box's status stuck at "Initializing search" (what an
  uncaught error in the theme's script did on Home and Concepts), and on Home a typed query
  ("token budget", "token-budget") that must be answered with the trainer's reference among
  the first three pages;
- any console error (an uncaught exception, a failed load, a 404 on loopback);
- at 1280 px: a name in a table broken inside a word (``PROXY_SHUTDOW`` / ``N_TIMEOUT``; a flag
  or a variable is one part and stays on one line, a list of choices or a path may break after
  its commas or slashes), a code block whose lines run out of its box (a horizontal scroll that
  hides a command's comment).

The search test counts the search worker's queries and answers in the page (a wrapper of
``Worker`` added before the page's scripts), so it reads the results of the query it typed, not
of one typed on the way to it.

Chromium and chromedriver are Debian's (``make test-tools``); without them here the tests are
skipped, and fail in CI.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.support import browser

SETTLE_S = 30  # a page's diagrams drawn and its search ready, on a busy 2-core machine
ANSWER_S = 30  # the search worker's answer to a typed query
POLL_S = 0.05  # how often a wait looks again
MIN_DIAGRAM_PX = 40  # a drawn diagram is taller than this; an empty box is not
TOP = 3  # the trainer's reference among the first TOP pages a query answers
READY = "Type to start searching"  # Material's search status once its index is loaded
TRAINER_REFERENCE = "reference/rollout-trainer/"

pytestmark = pytest.mark.skipif(
    not browser.installed() and not os.environ.get("CI"),
    reason="Debian's chromium and chromium-driver are not installed here (make test-tools)",
)


@dataclass
class Visit:
    """What one page did in the browser."""

    page: str
    diagrams: int  # pre.mermaid blocks in the page's HTML
    drawn: list[dict[str, Any]] = field(default_factory=list)  # each diagram as drawn
    raw: int = 0  # diagrams still showing their source (not replaced by a drawing)
    search: str = ""  # the search box's status once settled
    blocked: list[str] = field(default_factory=list)  # requests to other hosts
    errors: list[str] = field(default_factory=list)  # console errors
    broken_names: list[str] = field(default_factory=list)  # names in tables over two lines
    overflowing: list[str] = field(default_factory=list)  # code blocks wider than their box


@dataclass
class Walk:
    visits: list[Visit]
    driver: Chrome
    base: str
    gate: browser.Gate
    width: int  # the page's width in CSS pixels, scroll bar included


def _settled(visit: Visit) -> Any:
    """Diagrams drawn (Material replaces each ``pre.mermaid`` by a ``div.mermaid`` once mermaid
    has drawn it; until then the block shows its source) and the search index loaded: true when
    both are done."""

    def check(driver: Chrome) -> bool:
        ready, drawn, search = driver.execute_script(
            "const meta = document.querySelector('.md-search-result__meta');"
            "return [document.readyState, document.querySelectorAll('div.mermaid').length,"
            " meta ? meta.textContent.trim() : ''];"
        )
        visit.raw, visit.search = visit.diagrams - drawn, search
        return bool(ready == "complete" and visit.raw == 0 and search == READY)

    return check


def _shadow_svgs(driver: Chrome) -> list[dict[str, Any]]:
    """Each ``div.mermaid``'s drawing: Material puts it in a closed shadow root, which only the
    DevTools DOM (``pierce``) shows. Its ``aria-roledescription`` (``flowchart-v2``; ``error``
    for mermaid's error picture) and the text of its labels."""
    root = driver.execute_cdp_cmd("DOM.getDocument", {"depth": -1, "pierce": True})["root"]
    found: list[dict[str, Any]] = []

    def text(node: dict[str, Any]) -> str:
        own = node.get("nodeValue", "") if node.get("nodeType") == 3 else ""
        return own + "".join(text(child) for child in node.get("children", []))

    def walk(node: dict[str, Any]) -> None:
        attributes = node.get("attributes", [])
        named = dict(zip(attributes[::2], attributes[1::2], strict=True))
        if node.get("nodeName") == "DIV" and "mermaid" in named.get("class", "").split():
            for shadow in node.get("shadowRoots", []):
                for svg in shadow.get("children", []):
                    if svg.get("nodeName", "").lower() == "svg":
                        marks = svg.get("attributes", [])
                        role = dict(zip(marks[::2], marks[1::2], strict=True))
                        found.append(
                            {"role": role.get("aria-roledescription", ""), "text": text(svg)}
                        )
        for child in (*node.get("children", []), *node.get("shadowRoots", [])):
            walk(child)

    walk(root)
    return found


_LAYOUT = """
const codes = [...document.querySelectorAll('.md-typeset table code')];
const unmarked = codes.filter(code => !/\\s/.test(code.textContent) && !code.matches('.name'));
const names = [...unmarked, ...document.querySelectorAll('.md-typeset table code.name > span')]
  .filter(part => part.getClientRects().length > 1).map(part => part.textContent);
const blocks = [...document.querySelectorAll('.md-typeset pre > code')]
  .filter(code => code.scrollWidth > code.clientWidth + 1)
  .map(code => code.textContent.split('\\n').sort((a, b) => b.length - a.length)[0]);
const heights = [...document.querySelectorAll('div.mermaid')]
  .map(div => div.getBoundingClientRect().height);
return [names, blocks, heights];
"""


def _visit(driver: Chrome, base: str, gate: browser.Gate, site: Path, page: str) -> Visit:
    html = (site / page).read_text()
    visit = Visit(page, diagrams=len(re.findall(r'<pre class="mermaid"', html)))
    before = gate.count()
    driver.get(base + page.removesuffix("index.html"))
    with contextlib.suppress(TimeoutException):  # what it did not do is reported below
        WebDriverWait(driver, SETTLE_S, POLL_S).until(_settled(visit))
    names, blocks, heights = driver.execute_script(_LAYOUT)
    visit.broken_names, visit.overflowing = names, blocks
    if visit.diagrams:
        visit.drawn = [
            {**svg, "height": height}
            for svg, height in zip(_shadow_svgs(driver), heights, strict=False)
        ]
    visit.errors = browser.console_errors(driver)
    visit.blocked = gate.since(before)
    return visit


@pytest.fixture(scope="module")
def walk(built_site: Path) -> Iterator[Walk]:
    """Every page of the site, opened once in one browser; then the browser, for the tests that
    type into it."""
    site = built_site
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    with (
        browser.serve_folder(site) as base,
        browser.gate() as (gate, proxy),
        browser.chromium(proxy) as driver,
    ):
        visits = [_visit(driver, base, gate, site, page) for page in pages]
        yield Walk(visits, driver, base, gate, driver.execute_script("return innerWidth;"))


def test_no_page_asks_another_host(walk: Walk) -> None:
    assert len(walk.visits) > 25
    blocked = {v.page: v.blocked for v in walk.visits if v.blocked}
    assert blocked == {}


def test_every_diagram_is_drawn(walk: Walk) -> None:
    with_diagrams = [v for v in walk.visits if v.diagrams]
    assert {v.page for v in with_diagrams} >= {"index.html", "concepts/index.html"}
    for visit in with_diagrams:
        assert visit.raw == 0, f"{visit.page}: {visit.raw} diagram(s) show their source"
        assert len(visit.drawn) == visit.diagrams, visit.page
        for drawn in visit.drawn:
            assert drawn["role"] not in ("", "error"), (visit.page, drawn)
            assert drawn["height"] > MIN_DIAGRAM_PX, (visit.page, drawn)
            assert len(drawn["text"].split()) > 3, (visit.page, drawn)  # its labels


def test_no_console_error(walk: Walk) -> None:
    errors = {v.page: v.errors for v in walk.visits if v.errors}
    assert errors == {}


def test_search_is_ready_on_every_page(walk: Walk) -> None:
    stuck = {v.page: v.search for v in walk.visits if v.search != READY}
    assert stuck == {}


def test_names_in_tables_break_only_between_their_parts_at_1280(walk: Walk) -> None:
    assert walk.width == browser.WIDTH
    assert any(v.page.startswith("reference/rollout-proxy/") for v in walk.visits)
    broken = {v.page: v.broken_names for v in walk.visits if v.broken_names}
    assert broken == {}


def test_code_blocks_fit_their_box_at_1280(walk: Walk) -> None:
    assert walk.width == browser.WIDTH
    overflowing = {v.page: v.overflowing for v in walk.visits if v.overflowing}
    assert overflowing == {}


# Counts the search worker's queries and answers (Material's worker protocol: a message of
# type 2 asks, one of type 3 answers), so a test knows its typed query has been answered, not
# one typed on the way to it. Added before the page's own scripts run.
_COUNT_QUERIES = """
const Native = window.Worker;
window.__queries = {asked: [], answered: 0};
window.Worker = class extends Native {
  constructor(...args) {
    super(...args);
    this.addEventListener('message', e => {
      if (e.data && e.data.type === 3) window.__queries.answered += 1;
    });
  }
  postMessage(message, ...rest) {
    if (message && message.type === 2) window.__queries.asked.push(message.data);
    return super.postMessage(message, ...rest);
  }
};
"""


def _answered(query: str) -> Any:
    def check(driver: Chrome) -> bool:
        asked, answered = driver.execute_script(
            "return [window.__queries.asked, window.__queries.answered];"
        )
        return bool(asked and asked[-1] == query and answered == len(asked))

    return check


def _search(walk: Walk, query: str) -> list[str]:
    """``query`` typed into Home's search box; the pages it answers, in order."""
    driver = walk.driver
    driver.get(walk.base)
    WebDriverWait(driver, SETTLE_S, POLL_S).until(
        lambda d: (
            d.execute_script(
                "return document.querySelector('.md-search-result__meta').textContent.trim()"
            )
            == READY
        )
    )
    box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    box.send_keys(query)
    WebDriverWait(driver, ANSWER_S, POLL_S).until(_answered(query))
    links: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('.md-search-result__list > li')]"
        ".map(li => li.querySelector('a').href);"
    )
    return [link.removeprefix(walk.base).split("?")[0].split("#")[0] for link in links]


@pytest.fixture(scope="module")
def counting(walk: Walk) -> Walk:
    walk.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _COUNT_QUERIES})
    return walk


@pytest.mark.parametrize("query", ["token budget", "token-budget"])
def test_search_on_home_finds_the_trainers_reference(counting: Walk, query: str) -> None:
    before = counting.gate.count()
    pages = _search(counting, query)
    assert TRAINER_REFERENCE in pages[:TOP], pages[:8]
    assert counting.gate.since(before) == []
    assert browser.console_errors(counting.driver) == []
