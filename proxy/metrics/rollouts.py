"""Rollouts answered per run and the stale ones (``dataplane.rollouts``), read at scrape time.

``run`` is ``""`` for the bare path (always exported, from the proxy's start) and each declared
run's name (from its declaration): every series starts at zero, so a rate is right from the
first scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.metrics.labels import PREFIX


class Counts(Protocol):
    answered: int
    tokens: int
    stale: int
    stale_tokens: int


FAMILIES: tuple[tuple[str, str, Callable[[Counts], int]], ...] = (
    ("rollouts", "Generation requests answered 200 (rollouts), by run ('' the bare path)",
     lambda c: c.answered),
    ("rollout_tokens", "Completion tokens of the answered rollouts, by run",
     lambda c: c.tokens),
    ("stale_rollouts", "Rollouts answered after their adapter version left the window (TRL "
     "drops them as too stale), by run", lambda c: c.stale),
    ("stale_tokens", "Completion tokens of the stale rollouts: generated for nothing, by run",
     lambda c: c.stale_tokens),
)  # fmt: skip


class RolloutCollector(Collector):
    def __init__(self, counts: Callable[[], Mapping[str, Counts]]) -> None:
        self.counts = counts

    def collect(self) -> Iterable[Metric]:
        runs = self.counts()
        for name, documentation, value in FAMILIES:
            family = CounterMetricFamily(PREFIX + name, documentation, labels=["run"])
            for run, counts in runs.items():
                family.add_metric([run], value(counts))
            yield family
