"""``top`` shows one request rate, labelled with its window: the advisor's over
``--advice-window`` when the proxy has one (not that and a since-start rate side by side)."""

from __future__ import annotations

import re
from typing import Any

from proxy.console.figures import Figures
from proxy.console.view import Snapshot, summary_lines

SINCE_START = Figures(seconds=600.0, requests_per_s=3.0, p50_s=0.1, p99_s=0.2, hit_ratio=None)


def snapshot(advice: dict[str, Any] | None) -> Snapshot:
    return Snapshot("http://127.0.0.1:8000", {"advice": advice}, SINCE_START)


def rates(lines: list[str]) -> list[str]:
    return [m for line in lines for m in re.findall(r"req/s.*?\)|requests_per_s = \S+", line)]


def test_one_rate_the_advisors_window() -> None:
    advice = {
        "verdict": "balanced",
        "action": "no bottleneck found in the window",
        "figures": {"requests_per_s": 65.8, "window_s": 60.0, "load_spread": 1.12},
    }
    lines = summary_lines(snapshot(advice))
    assert rates(lines) == ["req/s (last 60 s)"]
    assert "65.8 req/s (last 60 s)" in lines[1]
    assert "  load_spread = 1.12" in lines  # the other figures stay


def test_without_an_advisor_the_rate_between_scrapes() -> None:
    lines = summary_lines(snapshot(None))
    assert rates(lines) == ["req/s (last 600 s)"] and "3.0 req/s" in lines[1]
