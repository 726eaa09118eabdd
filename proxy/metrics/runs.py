"""Per-run gauges and counters (several runs on one fleet, ``proxy.runs``), read at scrape time.

The ``run`` label takes only declared runs (at most ``proxy.runs.table.MAX_RUNS``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.metrics.labels import PREFIX
from proxy.runs.table import RunView

RunViews = Callable[[], list[RunView]]


class RunCollector(Collector):
    """``views``: the declared runs now; ``verdicts``: the advisor's (each run's is 1)."""

    def __init__(self, views: RunViews, verdicts: tuple[str, ...]) -> None:
        self.views = views
        self.verdicts = verdicts

    def collect(self) -> Iterable[Metric]:
        views = self.views()
        families = (
            (GaugeMetricFamily, "run_weight",
             "A run's weight (its share of max_loras, of the queue and of the slots)",
             lambda v: v.weight),
            (GaugeMetricFamily, "run_paused", "1 while a run's weight sync holds its new requests",
             lambda v: int(v.paused)),
            (GaugeMetricFamily, "run_adapters", "Adapter versions the fleet holds for a run",
             lambda v: v.adapters),
            (GaugeMetricFamily, "run_max_loras_share",
             "The adapters a run may hold on each replica (its share of max_loras)",
             lambda v: v.share if v.share is not None else float("nan")),
            (GaugeMetricFamily, "run_inflight", "The proxy's in-flight slots a run's requests hold",
             lambda v: v.inflight),
            (GaugeMetricFamily, "run_queued", "A run's requests waiting for a slot at the proxy",
             lambda v: v.queued),
            (CounterMetricFamily, "run_requests", "Requests answered under /runs/<run>/",
             lambda v: v.requests),
            (CounterMetricFamily, "run_pauses", "Pauses a run's trainer sent (its weight syncs)",
             lambda v: v.pauses),
        )  # fmt: skip
        for kind, name, documentation, value in families:
            family = kind(PREFIX + name, documentation, labels=["run"])
            for view in views:
                family.add_metric([view.name], value(view))
            yield family
        advice = GaugeMetricFamily(
            PREFIX + "run_advice",
            "1 for the advisor's verdict on a run now, 0 for the others",
            labels=["run", "verdict"],
        )
        for view in views:
            current = (view.advice or {}).get("verdict")
            for verdict in self.verdicts:
                advice.add_metric([view.name, verdict], 1.0 if verdict == current else 0.0)
        yield advice
