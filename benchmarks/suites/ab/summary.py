"""The A/B's arithmetic, no I/O: one side's run, one round's ratio, and the rounds' summary.

A round runs the same load through A and through B; each side's figure is its server process's
CPU per answered request. The round's ratio is B's figure over A's, so machine drift between
rounds (another tenant, a CPU's clock) cancels within the round. The summary is the median of
the clean rounds' ratios and their spread: min-max and the interquartile range (the inclusive
quartiles of ``statistics.quantiles``, which on 8 rounds lie between the 2nd and 3rd and the 6th
and 7th values). A round where either side had an error (a non-200, an incomplete stream),
answered nothing, or where A's CPU read 0 ticks (a run far too short) is dirty: listed, never in
the median. Cost: O(R log R) for R rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Side:
    """One target's run in one round."""

    cpu_s: float  # its server process's CPU time over the run
    count: int  # requests sent
    errors: int  # of them not answered 200 (or, streamed, not to the end)
    wall_s: float
    bytes: int  # body bytes of the answers received
    p50_ms: float
    p99_ms: float

    @property
    def answered(self) -> int:
        return self.count - self.errors

    @property
    def cpu_us(self) -> float | None:
        """CPU microseconds per answered request; None when none was answered."""
        return 1e6 * self.cpu_s / self.answered if self.answered > 0 else None

    @property
    def rps(self) -> float:
        return self.count / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def bytes_per_answer(self) -> float:
        return self.bytes / self.answered if self.answered > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Round:
    index: int  # from 1
    first: str  # "A" or "B": the side that ran first in this round
    a: Side
    b: Side

    @property
    def errors(self) -> int:
        return self.a.errors + self.b.errors

    @property
    def ratio(self) -> float | None:
        """B's CPU per request over A's; None for a dirty round."""
        a, b = self.a.cpu_us, self.b.cpu_us
        if self.errors or a is None or b is None or a == 0:
            return None
        return b / a


@dataclass(frozen=True, slots=True)
class Spread:
    """The middle and the spread of a set of figures."""

    median: float
    low: float
    high: float
    q1: float  # lower quartile
    q3: float  # upper quartile
    count: int


def spread(values: Sequence[float]) -> Spread:
    """Median, min-max and the inclusive quartiles of ``values`` (at least one)."""
    if not values:
        raise ValueError("no values to summarize")
    ordered = sorted(values)
    if len(ordered) == 1:
        q1 = q3 = ordered[0]
    else:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return Spread(statistics.median(ordered), ordered[0], ordered[-1], q1, q3, len(ordered))


@dataclass(frozen=True, slots=True)
class Summary:
    ratio: Spread | None  # over the clean rounds; None when no round was clean
    a_cpu_us: float | None  # median over the clean rounds
    b_cpu_us: float | None
    dirty: tuple[int, ...]  # rounds left out (their numbers)


def summarize(rounds: Sequence[Round]) -> Summary:
    """The clean rounds' ratio spread and each side's median CPU per request."""
    clean = [r for r in rounds if r.ratio is not None]
    dirty = tuple(r.index for r in rounds if r.ratio is None)
    if not clean:
        return Summary(None, None, None, dirty)
    ratios = [r.ratio for r in clean if r.ratio is not None]
    a = statistics.median(r.a.cpu_us for r in clean if r.a.cpu_us is not None)
    b = statistics.median(r.b.cpu_us for r in clean if r.b.cpu_us is not None)
    return Summary(spread(ratios), a, b, dirty)


def first_side(index: int, order: str) -> str:
    """Which side runs first in round ``index`` (from 1): always A for ``abab``; for ``abba``
    A in odd rounds and B in even ones, so a side's gain from running second cancels in pairs."""
    return "B" if order == "abba" and index % 2 == 0 else "A"


def as_json(rounds: Sequence[Round], summary: Summary) -> dict[str, Any]:
    """The rounds and their summary as the suite's JSON holds them."""

    def side(s: Side) -> dict[str, Any]:
        return {
            "cpu_us": s.cpu_us,
            "cpu_s": s.cpu_s,
            "count": s.count,
            "errors": s.errors,
            "rps": s.rps,
            "bytes_per_answer": s.bytes_per_answer,
            "p50_ms": s.p50_ms,
            "p99_ms": s.p99_ms,
        }

    ratio = summary.ratio
    return {
        "rounds": [
            {"round": r.index, "first": r.first, "ratio": r.ratio, "a": side(r.a), "b": side(r.b)}
            for r in rounds
        ],
        "ratio": None
        if ratio is None
        else {
            "median": ratio.median,
            "min": ratio.low,
            "max": ratio.high,
            "q1": ratio.q1,
            "q3": ratio.q3,
            "rounds": ratio.count,
        },
        "a_cpu_us_median": summary.a_cpu_us,
        "b_cpu_us_median": summary.b_cpu_us,
        "dirty_rounds": list(summary.dirty),
    }
