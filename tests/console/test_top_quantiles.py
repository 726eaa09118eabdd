"""``top``'s latency percentiles are estimated within a histogram bucket, as Prometheus'
``histogram_quantile`` does: every request in the 0.1-0.25 s bucket once showed p50 = p99 =
250 ms, the bucket's upper edge read as a quantile."""

from __future__ import annotations

import pytest

from proxy.console.figures import figures, parse, quantile

INF = float("inf")


def test_a_quantile_is_interpolated_within_its_bucket() -> None:
    one_bucket = [(0.1, 0.0), (0.25, 10.0), (0.5, 10.0), (INF, 10.0)]
    assert quantile(one_bucket, 0.5) == pytest.approx(0.175)  # 0.1 + 0.15 x 5/10
    assert quantile(one_bucket, 0.99) == pytest.approx(0.2485)  # 0.1 + 0.15 x 9.9/10
    spread = [(0.1, 5.0), (0.25, 10.0), (INF, 12.0)]
    assert quantile(spread, 0.5) == pytest.approx(0.13)  # rank 6: 1 of the 5 in 0.1-0.25
    assert quantile(spread, 0.25) == pytest.approx(0.06)  # the first bucket starts at 0


def test_a_rank_past_every_finite_bucket_is_the_highest_finite_bound() -> None:
    assert quantile([(0.1, 5.0), (0.25, 10.0), (INF, 12.0)], 0.99) == 0.25


def test_no_observations_no_quantile() -> None:
    assert quantile([], 0.5) is None
    assert quantile([(0.1, 0.0), (INF, 0.0)], 0.5) is None


def test_the_figures_between_two_scrapes_interpolate_the_window() -> None:
    def page(fast: int, slow: int) -> str:
        rows = [(0.1, fast), (0.25, fast + slow), ("+Inf", fast + slow)]
        lines = "".join(
            f'rollout_proxy_request_duration_seconds_bucket{{route="completions",le="{le}"}} '
            f"{count}\n"
            for le, count in rows
        )
        return "# TYPE rollout_proxy_request_duration_seconds histogram\n" + lines

    before, now = parse(page(fast=100, slow=0)), parse(page(fast=100, slow=10))
    seen = figures(now, before, 10.0)
    assert seen.p50_s == pytest.approx(0.175) and seen.p99_s == pytest.approx(0.2485)
    assert seen.p50_s != seen.p99_s
