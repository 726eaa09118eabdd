"""Every metric family ``Metrics`` records, as data: one ``Family`` row each, read once by
``create`` when the recorder is built.

A row names the family (the exported name less ``PREFIX``, which is also the recorder's attribute,
``_`` + name), its kind, its help text, its label names, its bucket bounds (the named tuples of
``labels``) and the label values exported from the start, at 0. The kinds:

- ``tally`` and ``spread``: the request path's lock-free counter and histogram
  (``proxy.metrics.tally``), rendered at scrape time by one ``TallyCollector``;
- ``counter`` and ``histogram``: prometheus_client metrics in the registry. A labelled one is
  reached through ``Children``, which binds each label child once.

Order is kept: the registry renders its families in the order rows are created.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

from proxy.metrics.labels import (
    ADAPTER_ATTEMPT_BUCKETS,
    ADAPTER_LOAD_BUCKETS,
    BACKGROUND_TASKS,
    BAD_INPUT_KINDS,
    CONTROL_ACTIONS,
    CONTROL_BUCKETS,
    LATENCY_BUCKETS,
    MIRROR_BUCKETS,
    MIRROR_FAILURE_CAUSES,
    OVERHEAD_BUCKETS,
    PAUSE_BUCKETS,
    PREFIX,
    PUSH_BUCKETS,
    PUSH_FALLBACK_CAUSES,
    REJECTION_REASONS,
    SCALER_ACTIONS,
    SYNC_PATHS,
    SYNC_WINDOW_BUCKETS,
)
from proxy.metrics.tally import Spread, Tally

Kind = Literal["tally", "spread", "counter", "histogram"]
M = TypeVar("M", bound=MetricWrapperBase)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    zeros: tuple[tuple[str, ...], ...] = ()  # label values exported from the start, at 0

    def __post_init__(self) -> None:
        if self.zeros and (self.kind == "spread" or not self.labels):
            raise ValueError(f"{self.name}: zeros need a labelled tally, counter or histogram")


def _each(values: Iterable[str]) -> tuple[tuple[str], ...]:
    return tuple((value,) for value in values)


MIGRATION_OUTCOMES = (
    "continued",
    "completed",
    "exhausted",
    "no_replica",
    "not_resumable",
    "timeout",
)
FAMILIES = (
    Family("requests", "tally", "Requests answered, by route and HTTP status", ("route", "status")),
    Family(
        "request_duration_seconds",
        "spread",
        "Time from request to last byte sent",
        ("route",),
        LATENCY_BUCKETS,
    ),
    Family(
        "upstream_ttfb_seconds",
        "spread",
        "Time from upstream send to response headers",
        ("route",),
        LATENCY_BUCKETS,
    ),
    Family(
        "overhead_seconds",
        "spread",
        "Time spent in the proxy, excluding waiting on upstream",
        ("route",),
        OVERHEAD_BUCKETS,
    ),
    Family("replica_requests", "tally", "Generation requests sent to each replica", ("replica",)),
    Family(
        "tokens",
        "tally",
        "Prompt tokens reported by replicas (usage), and those served from their prefix caches",
        ("kind",),
        zeros=_each(("prompt", "cached")),
    ),
    Family(
        "replica_tokens",
        "tally",
        "Prompt tokens per replica (usage), and those its prefix cache served",
        ("replica", "kind"),
    ),
    Family(
        "reuse_tokens",
        "tally",
        "Sampled prompts: their tokens, and those whose prefix the fleet had seen before "
        "(the reuse available to routing)",
        ("kind",),
        zeros=_each(("prompt", "available")),
    ),
    Family("routing_decisions", "tally", "Routing decisions, by reason", ("reason",)),
    Family(
        "rollouts",
        "tally",
        "Generation requests answered 200 (rollouts), by run ('' the bare path)",
        ("run",),
        zeros=(("",),),
    ),
    Family(
        "rollout_tokens",
        "tally",
        "Completion tokens of the answered rollouts, by run",
        ("run",),
        zeros=(("",),),
    ),
    Family(
        "stale_rollouts",
        "tally",
        "Rollouts answered after their adapter version left the window (TRL drops them as too "
        "stale), by run",
        ("run",),
        zeros=(("",),),
    ),
    Family(
        "stale_tokens",
        "tally",
        "Completion tokens of the stale rollouts: generated for nothing, by run",
        ("run",),
        zeros=(("",),),
    ),
    Family(
        "rejections",
        "counter",
        "Requests refused by the proxy, by reason",
        ("reason",),
        zeros=_each(REJECTION_REASONS),
    ),
    Family(
        "bad_client_requests",
        "counter",
        "Requests aiohttp could not parse, by kind (logged once per kind per minute)",
        ("kind",),
        zeros=_each(BAD_INPUT_KINDS),
    ),
    Family(
        "background_errors",
        "counter",
        "Exceptions a background task survived (logged), by task",
        ("task",),
        zeros=_each(BACKGROUND_TASKS),
    ),
    Family(
        "load_scrapes",
        "counter",
        "Scrapes of the replicas' /metrics load figures, by outcome",
        ("outcome",),
        zeros=_each(("ok", "failed")),
    ),
    Family(
        "replica_errors", "counter", "Upstream failures per replica, by kind", ("replica", "kind")
    ),
    Family("failovers", "counter", "Requests retried on another replica before the first byte"),
    Family(
        "stream_migrations",
        "counter",
        "Streams whose replica failed mid-stream, by outcome: continued on another replica, "
        "completed (the last token was sent), or cut (exhausted, no_replica, not_resumable, "
        "timeout)",
        ("outcome",),
        zeros=_each(MIGRATION_OUTCOMES),
    ),
    Family(
        "adapter_loads", "counter", "Adapter loads per replica, by outcome", ("replica", "outcome")
    ),
    Family(
        "adapter_load_attempts",
        "histogram",
        "Attempts per adapter load (mount lag retries)",
        buckets=ADAPTER_ATTEMPT_BUCKETS,
    ),
    Family(
        "adapter_load_seconds",
        "histogram",
        "Adapter load time per replica, retries included",
        ("replica",),
        ADAPTER_LOAD_BUCKETS,
    ),
    Family(
        "adapter_fleet_load_seconds",
        "histogram",
        "From a load request to the version loaded on every routable replica",
        ("outcome",),
        ADAPTER_LOAD_BUCKETS,
    ),
    Family(
        "restarts",
        "counter",
        "Times the supervisor restarted the proxy (--supervise) before this process",
    ),
    Family(
        "control_seconds",
        "histogram",
        "Fan-out of a state change to every replica (TRL's pause and resume), by action",
        ("action",),
        CONTROL_BUCKETS,
        _each(CONTROL_ACTIONS),
    ),
    Family(
        "sync_paused_seconds",
        "histogram",
        "How long the fleet stood frozen per weight sync (a forwarded /pause to its /resume; "
        "none unless --forward-pause)",
        buckets=PAUSE_BUCKETS,
    ),
    Family(
        "sync_window_seconds",
        "histogram",
        "TRL's weight syncs as the proxy saw them, from its /pause to its /resume (the fleet "
        "generates throughout unless --forward-pause)",
        buckets=SYNC_WINDOW_BUCKETS,
    ),
    Family("reconciliations", "counter", "Replicas brought in step with the adapter window"),
    Family(
        "probe_seconds",
        "histogram",
        "Served-policy probes: one short request to a replica for a version it loaded",
        buckets=ADAPTER_LOAD_BUCKETS,
    ),
    Family(
        "policy_wait_seconds",
        "histogram",
        "From a version's load on a replica to its probe's verdict: what that version's first "
        "requests there wait for",
        buckets=ADAPTER_LOAD_BUCKETS,
    ),
    Family(
        "adapter_push_bytes",
        "counter",
        "Adapter bytes pushed into each replica's receiver (completed pushes)",
        ("replica",),
    ),
    Family(
        "adapter_push_seconds",
        "histogram",
        "Time of one completed push to one replica (upload, checks, publish)",
        ("replica",),
        PUSH_BUCKETS,
    ),
    Family(
        "adapter_push_fallbacks",
        "counter",
        "Replica loads that fell back to the bucket mount, by cause",
        ("cause",),
        zeros=_each(PUSH_FALLBACK_CAUSES),
    ),
    Family(
        "adapter_fleet_sync_seconds",
        "histogram",
        "From a load request to the version on every routable replica, by how they got it",
        ("path",),
        PUSH_BUCKETS,
        _each(SYNC_PATHS),
    ),
    Family(
        "adapter_mirror_seconds",
        "histogram",
        "From a version first seen on the trainer's disk to its copy landed in the bucket",
        buckets=MIRROR_BUCKETS,
    ),
    Family(
        "scaler_decisions",
        "counter",
        "The run's scaler's decisions as it reported them (POST /admin/scaler), by action",
        ("action",),
        zeros=_each(SCALER_ACTIONS),
    ),
    Family(
        "adapter_mirror_failures",
        "counter",
        "Adapter mirror failures, by cause (a copy attempt is retried; nothing is dropped)",
        ("cause",),
        zeros=_each(MIRROR_FAILURE_CAUSES),
    ),
)


class Children(dict[tuple[str, ...], M], Generic[M]):
    """A labelled prometheus_client metric's children by label values, each bound once.

    The one cache kept beside prometheus_client's own, because ``metric.labels(*values)`` is
    slow and rejections and replica errors are counted per request: a labelled counter's
    ``inc()`` costs ~3.9 us through ``labels()`` and ~1.5 us through ``children[values]``
    (timeit, best of 7, prometheus_client 0.26, CPython 3.11; the bare ``inc()`` ~1.1 us).
    """

    __slots__ = ("metric",)

    def __init__(self, metric: M) -> None:
        super().__init__()
        self.metric = metric

    def __missing__(self, values: tuple[str, ...]) -> M:
        child = self[values] = self.metric.labels(*values)
        return child

    def bind(self, values: tuple[str, ...]) -> None:
        """Export ``values``' child from now on, at 0 until it counts."""
        self[values]  # ``__missing__`` binds it


Made = Tally | Spread | Counter | Histogram | Children[Counter] | Children[Histogram]


def create(family: Family, registry: CollectorRegistry) -> Made:
    """The metric ``family`` describes, its zeros exported; prometheus_client's in ``registry``."""
    name = PREFIX + family.name
    if family.kind == "tally":
        tally = Tally(name, family.help, family.labels)
        for values in family.zeros:
            tally.add(values, 0)
        return tally
    if family.kind == "spread":
        return Spread(name, family.help, family.labels, family.buckets)
    if family.kind == "counter":
        counter = Counter(name, family.help, family.labels, registry=registry)
        return _children(counter, family.zeros) if family.labels else counter
    histogram = Histogram(
        name, family.help, family.labels, registry=registry, buckets=family.buckets
    )
    return _children(histogram, family.zeros) if family.labels else histogram


def _children(metric: M, zeros: tuple[tuple[str, ...], ...]) -> Children[M]:
    children = Children(metric)
    for values in zeros:  # a child, once bound, is exported at 0
        children[values] = metric.labels(*values)
    return children
