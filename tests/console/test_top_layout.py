"""The live view's layout, rendered by rich at 80 columns without a terminal: a compact head
(at most ``HEAD_LINES``, each cut, never wrapped), one line per replica however long its state's
reason, and the warnings (in ``--once`` too)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from proxy.console.figures import Figures
from proxy.console.view import HEAD_LINES, Snapshot, head_lines, live_view, plain

FIGURES = Figures(seconds=60.0, requests_per_s=3.0, p50_s=0.1, p99_s=0.2, hit_ratio=None)
WARNINGS = [
    "adapter directory /lora/run/.vllm_lora does not exist (yet): no adapter version is found "
    "until it does",
    "run a gets max_loras 1 (its share of the replicas' 6, weight 1 of 4); TRL needs "
    "max_staleness + 2, so no max_staleness fits",
]


def status(n: int) -> dict[str, Any]:
    replicas = [
        {"id": f"replica-{i}.internal:8000", "state": "healthy", "routable": True, "inflight": 2}
        for i in range(n)
    ]
    reason = "probe failed: connection refused by the replica's host"
    replicas[0] |= {"state": "ejected", "routable": False, "last_error": reason}
    return {
        "policy": "prefix",
        "replicas": replicas,
        "warnings": WARNINGS,
        "advice": {
            "verdict": "concentrated",
            "action": "replica-1.internal:8000 took 40 of the window's 41 requests: expected",
            "figures": {f"figure_{i}": 0.5 for i in range(15)},
        },
    }


def rendered(snap: Snapshot) -> list[str]:
    console = Console(width=80, height=24, record=True, color_system=None)
    with console.capture() as capture:
        console.print(live_view(snap))
    return capture.get().splitlines()


def test_the_head_is_compact_and_every_replica_is_one_line() -> None:
    snap = Snapshot("http://127.0.0.1:8000", status(5), FIGURES)
    assert len(head_lines(snap)) <= HEAD_LINES
    lines = rendered(snap)
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("rollout-proxy top (q quits)") and lines[1].startswith("in flight")
    assert lines[HEAD_LINES - 1].startswith("warning (+1 more below): adapter directory")
    rows = [line for line in lines if line.startswith("replica-")]
    assert len(rows) == 5  # one line each, the ejected one's reason cut
    assert "ejected (probe" in rows[0] and "…" in rows[0]
    table_end = lines.index(rows[-1])
    assert table_end < 24 - 1  # on an 80x24 screen, with room to spare
    assert lines[table_end + 1].startswith("warning: adapter directory")  # the rest, below


def test_once_says_every_warning_in_full() -> None:
    text = plain(Snapshot("http://127.0.0.1:8000", status(2), FIGURES))
    for warning in WARNINGS:
        assert f"warning: {warning}\n" in text


SCALER = {
    "action": "add",
    "count": 1,
    "age_s": 12.0,
    "reason": "the trainer waited 31% of the last window for samples for 180 s",
    "held_back": None,
    "replicas": {"wanted": 3, "ready": 2, "starting": 1, "draining": 0},
    "bounds": {"min": 1, "max": 4},
    "failed_launches": 0,
    "scaled": [{"name": "r1-replica-2", "job": "abc", "state": "starting"}],
}


def test_the_scalers_last_decision_and_scaled_jobs_show_in_once_and_live() -> None:
    snap = Snapshot("http://127.0.0.1:8000", {**status(2), "scaler": SCALER}, FIGURES)
    once = plain(snap)
    assert "scaler: add 1 (12 s ago): the trainer waited 31% of the last window" in once
    assert (
        "replicas wanted 3 ready 2 starting 1 draining 0  range 1..4  failed launches 0  "
        "scaled: r1-replica-2 starting" in once
    )
    assert any(line.startswith("scaler: add 1") for line in rendered(snap))
    assert "scaler" not in plain(Snapshot("http://127.0.0.1:8000", status(2), FIGURES))
