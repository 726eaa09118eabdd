"""The A/B's arithmetic (``benchmarks.suites.ab.summary``): a side's CPU per answered request, a
round's ratio, the rounds' median and spread, dirty rounds listed and left out, who goes first."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.suites.ab.summary import (
    Round,
    Side,
    as_json,
    first_side,
    spread,
    summarize,
)


def side(cpu_s: float, count: int = 1000, errors: int = 0) -> Side:
    return Side(cpu_s, count, errors, wall_s=0.5, bytes=477 * count, p50_ms=8.0, p99_ms=12.0)


def test_a_sides_figure_is_its_cpu_over_the_requests_it_answered() -> None:
    assert side(0.15).cpu_us == pytest.approx(150.0)
    assert side(0.15, errors=250).cpu_us == pytest.approx(200.0)  # 750 answered
    assert side(0.15, errors=1000).cpu_us is None
    assert side(0.15).rps == pytest.approx(2000.0)
    assert side(0.15, errors=500).bytes_per_answer == pytest.approx(954.0)


def test_a_rounds_ratio_is_b_over_a_and_none_when_either_side_erred() -> None:
    assert Round(1, "A", side(0.15), side(0.12)).ratio == pytest.approx(0.8)
    assert Round(2, "B", side(0.15, errors=1), side(0.12)).ratio is None
    assert Round(3, "A", side(0.15), side(0.12, errors=1)).errors == 1
    assert Round(4, "A", side(0.0), side(0.12)).ratio is None  # A read no tick at all


def test_the_spread_is_the_median_the_extremes_and_the_inclusive_quartiles() -> None:
    values = [1.04, 0.98, 1.01, 0.99, 1.00, 1.02, 0.97, 1.03]  # eight rounds, out of order
    found = spread(values)
    assert found.median == pytest.approx(1.005)
    assert (found.low, found.high, found.count) == (0.97, 1.04, 8)
    # Inclusive quartiles of 0.97 .. 1.04 in steps of 0.01: a quarter of the way along.
    assert found.q1 == pytest.approx(0.9875)
    assert found.q3 == pytest.approx(1.0225)
    assert [found.q1, found.q3] == pytest.approx(
        statistics.quantiles(values, n=4, method="inclusive")[::2]
    )


def test_one_value_is_its_own_spread_and_none_is_refused() -> None:
    one = spread([1.2])
    assert (one.median, one.low, one.high, one.q1, one.q3) == (1.2, 1.2, 1.2, 1.2, 1.2)
    with pytest.raises(ValueError, match="no values"):
        spread([])


def test_dirty_rounds_are_listed_and_left_out_of_every_median() -> None:
    rounds = [
        Round(1, "A", side(0.100), side(0.100)),
        Round(2, "B", side(0.100), side(0.300, errors=3)),  # a side that erred: out
        Round(3, "A", side(0.100), side(0.110)),
        Round(4, "B", side(0.200), side(0.180)),
    ]
    summary = summarize(rounds)
    assert summary.dirty == (2,)
    assert summary.ratio is not None
    assert summary.ratio.count == 3
    assert summary.ratio.median == pytest.approx(1.0)
    assert (summary.ratio.low, summary.ratio.high) == pytest.approx((0.9, 1.1))
    assert summary.a_cpu_us == pytest.approx(100.0)
    assert summary.b_cpu_us == pytest.approx(110.0)


def test_no_clean_round_gives_no_ratio() -> None:
    summary = summarize([Round(1, "A", side(0.1, errors=1000), side(0.1))])
    assert summary.ratio is None and summary.a_cpu_us is None and summary.dirty == (1,)


def test_abba_alternates_the_side_that_goes_first_and_abab_never_does() -> None:
    assert [first_side(i, "abba") for i in range(1, 7)] == ["A", "B", "A", "B", "A", "B"]
    assert {first_side(i, "abab") for i in range(1, 7)} == {"A"}


def test_the_json_holds_every_round_and_the_summary() -> None:
    rounds = [Round(1, "A", side(0.1), side(0.11)), Round(2, "B", side(0.1, errors=2), side(0.1))]
    doc = as_json(rounds, summarize(rounds))
    assert [r["round"] for r in doc["rounds"]] == [1, 2]
    assert doc["rounds"][1]["ratio"] is None and doc["rounds"][1]["a"]["errors"] == 2
    assert doc["ratio"]["median"] == pytest.approx(1.1) and doc["ratio"]["rounds"] == 1
    assert doc["dirty_rounds"] == [2]
