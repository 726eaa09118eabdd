"""``top`` shows a line per declared run (``/proxy/status``'s ``runs``), none without runs."""

from __future__ import annotations

from proxy.console.figures import Figures
from proxy.console.view import Snapshot, summary_lines

FIGURES = Figures(seconds=60.0, requests_per_s=3.0, p50_s=0.1, p99_s=0.2, hit_ratio=None)
RUN = {"weight": 2.0, "paused": True, "pauses": 4, "adapters": 3, "max_loras_share": 4,
       "requests": 120, "inflight": 7, "queued": 2,
       "advice": {"verdict": "client-concurrency-bound", "action": "raise it"}}  # fmt: skip


def test_a_line_per_run_in_name_order() -> None:
    status = {"runs": {"b": RUN, "a": {**RUN, "paused": False, "weight": 1.0, "advice": None}}}
    lines = [line for line in summary_lines(Snapshot("u", status, FIGURES)) if line[:4] == "run "]
    assert lines == [
        "run a  weight 1  paused no  adapters 3/4  in flight 7  queued 2  requests 120  pauses 4",
        "run b  weight 2  paused yes  adapters 3/4  in flight 7  queued 2  requests 120  pauses 4"
        "  advice client-concurrency-bound",
    ]


def test_no_run_lines_for_a_single_run_proxy() -> None:
    assert not [line for line in summary_lines(Snapshot("u", {}, FIGURES)) if line[:4] == "run "]


def test_the_rollouts_line_shows_the_waste_of_the_bare_path_and_of_each_busy_run() -> None:
    rollouts = {
        "": {"answered": 100, "stale": 6, "stale_share": 0.05},
        "a": {"answered": 0, "stale": 0, "stale_share": None},
        "b": {"answered": 10, "stale": 0, "stale_share": 0.0},
    }
    lines = summary_lines(Snapshot("u", {"rollouts": rollouts}, FIGURES))
    shown = [line for line in lines if line.startswith("rollouts")]
    assert shown == [
        "rollouts 100  stale 6 (5% of their tokens: answered after their version left the window)",
        "rollouts of run b 10  stale 0 (0% of their tokens: answered after their version left "
        "the window)",
    ]
