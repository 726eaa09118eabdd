"""What the pages state about the project's own figures and outputs, against their sources: the
learning run's table against its JSON, every published result on the figures page, the
advisor's verdicts and thresholds against the advisor, ``top``'s example against what ``top``
prints for a live proxy."""

from __future__ import annotations

import json
import re

from docsgen.metric_pages import families
from proxy.insight import advisor
from tests.console.test_top import top
from tests.support.docs import ROOT, blocks, section
from tests.support.fleet import run_stack

RESULTS = ROOT / "benchmarks" / "results"
FIGURES = "docs/figures.md"


def _learn_rows(text: str) -> dict[str, list[str]]:
    """The learning table's rows by leg (``fleet``, ``direct``): its cells after the first."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| through the proxy"):
            rows["fleet"] = [c.strip() for c in line.split("|")[2:-1]]
        elif line.startswith("| one vLLM, direct"):
            rows["direct"] = [c.strip() for c in line.split("|")[2:-1]]
    return rows


def test_the_learning_table_is_the_published_run() -> None:
    results = json.loads((RESULTS / "learn.json").read_text())["results"]
    for page in ("README.md", FIGURES):
        rows = _learn_rows((ROOT / page).read_text())
        assert set(rows) == {"fleet", "direct"}, page
        for leg, cells in rows.items():
            verdict, wall = results[leg]["verdict"], results[leg]["wall_s"]
            assert cells == [
                f"{verdict['first_mean']:.3f}",
                f"{verdict['last_mean']:.3f}",
                f"{verdict['margin']:.3f} (> {verdict['wanted']:.3f})",
                f"{verdict['kl_max']:.3f}, {verdict['kl_typical']:.3f}",
                f"{wall:.0f} s",
            ], (page, leg)


def test_every_published_result_is_on_the_figures_page_with_its_command() -> None:
    text = (ROOT / FIGURES).read_text()
    published = sorted(p.name for p in RESULTS.iterdir() if p.suffix in (".json", ".png"))
    assert published
    missing = [name for name in published if f"../benchmarks/results/{name}" not in text]
    assert missing == []
    (commands,) = [b.body for b in blocks(ROOT / FIGURES) if "results/learn.json" in b.body]
    for name in published:
        if name.endswith(".json"):
            assert f"--json benchmarks/results/{name}" in commands, name


def _verdict_rows() -> dict[str, str]:
    rows = {}
    for line in section("docs/operations.md", "The advisor's verdicts").splitlines():
        found = re.match(r"\| `([a-z-]+)` \|(.*)$", line)
        if found:
            rows[found[1]] = found[2]
    return rows


def _percent(share: float) -> str:
    return f"{share * 100:g} %"


def test_the_advisors_verdicts_are_the_advisors() -> None:
    rows = _verdict_rows()
    assert list(rows) == [
        "warming-up",
        *(v for v in advisor.VERDICTS if v != "warming-up"),
    ], "one row per verdict, in the order the rules apply"
    assert f"fewer than {advisor.MIN_SAMPLES} samples" in rows["warming-up"]
    assert _percent(advisor.SYNC_SHARE) in rows["sync-bound"]
    assert _percent(advisor.STALE_SHARE) in rows["stale-waste"]
    assert "half the samples" in rows["generation-bound"] and advisor.SATURATED_SHARE == 0.5
    assert f"KV cache at {_percent(advisor.KV_FULL)}" in rows["generation-bound"]
    assert f"{_percent(advisor.PLATEAU_SHARE)} of the samples" in rows["client-concurrency-bound"]
    assert f"{advisor.IMBALANCE:g} x the mean" in rows["imbalanced"]
    assert _percent(advisor.POOR_EFFICIENCY) in rows["cache-poor"]
    assert _percent(advisor.MIN_REUSE) in rows["cache-poor"]


def _shape(text: str) -> tuple[list[str], list[str]]:
    """``top --once``'s shape: the first word of each unindented line above the replica table,
    and the table's header."""
    head, _, table = text.partition("\nreplica ")
    lines = [line.split()[0] for line in head.splitlines() if line[:1].strip()]
    return lines, ["replica", *table.splitlines()[0].split()]


async def test_tops_example_has_the_shape_top_prints() -> None:
    (example,) = [
        b.body for b in blocks(ROOT / "docs/operations.md") if "rollout-proxy top" in b.body
    ]
    shown = example.split("\n", 1)[1]  # after the command line
    async with run_stack(2) as stack:
        code, out, err = await top(stack.proxy_url, "--once")
    assert code == 0, err
    lines, header = _shape(out)
    shown_lines, shown_header = _shape(shown)
    assert (shown_lines, shown_header) == (lines, header)


def _label_names(text: str) -> set[str]:
    """The label names a cell of the metrics table gives: its code spans outside parentheses."""
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    return set(re.findall(r"`(\w+)`", text.split(":")[0]))


def test_the_metrics_table_gives_each_family_its_type_and_labels() -> None:
    exported = {row.name: row for row in families()}
    rows = 0
    for line in section("docs/operations.md", "Metrics").splitlines():
        if not line.startswith("| `rollout_proxy_"):
            continue
        names, kind, labels = (cell.strip() for cell in line.split("|")[1:4])
        for name in re.findall(r"`(rollout_proxy_\w+)`", names):
            rows += 1
            assert kind == exported[name].type, name
            assert _label_names(labels) == set(exported[name].labels), name
    assert rows == len(exported)
