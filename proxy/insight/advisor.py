"""The bottleneck advisor: from a window of samples of the run, what limits it now, and the knob.

Pure: ``advise(window)`` reads a list of ``Sample`` (oldest first) and returns ``Advice`` with a
verdict, the action to take, and the figures behind it. The first rule that holds wins:

1. ``idle``: almost nothing in flight and no requests: nothing to say.
2. ``sync-bound``: the fleet spent at least ``SYNC_SHARE`` of the window paused by weight syncs:
   turn on adapter push (when adapters still travel through the bucket mount), or raise TRL's
   ``weight_sync_steps``.
3. ``stale-waste``: at least ``STALE_SHARE`` of the rollout tokens answered in the window went
   to rollouts whose adapter version had left the window (TRL drops them as too stale): lower
   TRL's ``max_inflight_tasks`` (the fleet what-if finds the setting), or raise
   ``max_staleness``.
4. ``generation-bound``: in at least ``SATURATED_SHARE`` of the samples the replicas were full
   (requests queued at the proxy for a slot, replicas reporting waiting requests, or their KV
   cache at ``KV_FULL``): add replicas.
5. ``client-concurrency-bound``: the replicas had room, yet the client's requests in flight sat
   at a plateau (``PLATEAU_SHARE`` of the samples within 10% of the window's maximum, nothing
   queued): TRL's ``max_inflight_tasks`` is the cap; raise it.
6. ``imbalanced``: one replica carries ``IMBALANCE`` x the mean in-flight load: check spills and
   ``--load-factor``/``--load-slack``. Or, over the window's requests (at least
   ``MIN_REQUESTS``, per replica routable now, since all of them were), one took ``IMBALANCE``
   x the mean: ``concentrated`` when that is expected, with why (most requests were routed by
   key, ``KEYED_SHARE``: prefix affinity keeps requests that share a prompt prefix or a routing
   key on one replica, so the traffic had few distinct prefixes; or the client sent one request
   at a time, so every replica was idle and the first won each tie); else ``imbalanced``, with
   what to check (replicas that do not all serve the models asked for, the load bounds).
7. ``cache-poor``: of the prefix reuse the traffic offered (at least ``MIN_REUSE``), routing
   captured less than ``POOR_EFFICIENCY``: prompts re-do prefill on the wrong replica.
8. ``balanced``: none of the above; the fleet is used and the run is not held back by the proxy,
   and its requests spread over the replicas.

With several runs on one fleet (``proxy.runs``), ``advise_run`` gives each run its own verdict
by the same rules: the window seen through that run's requests (its in flight, queued at the
proxy and answered) beside the replicas' state, which every run shares. Syncs, prefix reuse and
the requests' spread are not split by run (a run's pause stays at its relay), so rules 2 and 7
and rule 6's requests are the fleet's alone; the stale share is each run's own.

Whatever the verdict, the advice carries the last sample's ``warnings``: what is wrong now that
no knob of the advisor's fixes (an adapter directory that does not exist yet, a run whose share of
``max_loras`` is short of TRL's need), each in one line; a run's advice carries its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

SYNC_SHARE = 0.2
STALE_SHARE = 0.03  # as the fleet what-if's default waste budget (benchmarks/fleet/whatif.py)
SATURATED_SHARE = 0.5
KV_FULL = 0.9
PLATEAU_SHARE = 0.8
IMBALANCE = 1.5
POOR_EFFICIENCY = 0.6
MIN_REUSE = 0.2
MIN_SAMPLES = 5
MIN_REQUESTS = 20  # the window's requests it takes to judge how they spread over replicas
KEYED_SHARE = 0.5  # routed by key (prefix affinity, a sticky key, an explicit routing key)
KEYED = ("affinity", "sticky", "explicit_key")  # routing decisions' reasons that follow a key


@dataclass(frozen=True, slots=True)
class RunSample:
    """One run at one moment (several runs on one fleet): its requests in flight, queued at the
    proxy, and answered so far."""

    inflight: int
    queued: int
    requests: float
    rollout_tokens: float = 0.0
    stale_tokens: float = 0.0
    warnings: tuple[str, ...] = ()  # the run's own (its share of max_loras)


@dataclass(frozen=True, slots=True)
class Sample:
    """The run at one moment; counters are cumulative (the window takes differences)."""

    at: float  # clock seconds
    inflight: int
    queued: int
    replica_inflight: dict[str, int] = field(default_factory=dict)
    replica_waiting: dict[str, float] = field(default_factory=dict)  # reported (absent: stale)
    replica_kv: dict[str, float] = field(default_factory=dict)  # reported KV usage, 0..1
    requests: float = 0.0
    paused_s: float = 0.0
    prompt_tokens: float = 0.0
    cached_tokens: float = 0.0
    offered_tokens: float = 0.0  # sampled prompts (available reuse estimate)
    available_tokens: float = 0.0
    pushing: bool = False  # adapters reach the replicas by push (else through the bucket mount)
    rollout_tokens: float = 0.0  # completion tokens of answered rollouts (``dataplane.rollouts``)
    stale_tokens: float = 0.0  # ... of those answered after their version left the window
    runs: dict[str, RunSample] = field(default_factory=dict)  # declared runs (``proxy.runs``)
    # What is wrong now that the proxy cannot fix (``http.status.Status.warnings``), each a line.
    warnings: tuple[str, ...] = ()
    replica_requests: dict[str, float] = field(default_factory=dict)  # answered, per routable
    decisions: dict[str, float] = field(default_factory=dict)  # routing decisions by reason


@dataclass(frozen=True, slots=True)
class Advice:
    verdict: str
    action: str
    figures: dict[str, float | None]
    warnings: tuple[str, ...] = ()  # the last sample's, whatever the verdict

    def as_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "action": self.action,
            "figures": self.figures,
            "warnings": list(self.warnings),
        }


VERDICTS = (
    "idle",
    "sync-bound",
    "stale-waste",
    "generation-bound",
    "client-concurrency-bound",
    "imbalanced",
    "concentrated",
    "cache-poor",
    "balanced",
    "warming-up",
)


def _saturated(s: Sample) -> bool:
    waiting = sum(s.replica_waiting.values())
    kv = max(s.replica_kv.values(), default=0.0)
    return s.queued > 0 or waiting >= 1 or kv >= KV_FULL


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def figures(window: Sequence[Sample]) -> dict[str, float | None]:
    first, last = window[0], window[-1]
    seconds = last.at - first.at
    peak = max(s.inflight for s in window)
    loads: dict[str, list[int]] = {}
    for s in window:
        for rid, count in s.replica_inflight.items():
            loads.setdefault(rid, []).append(count)
    means = [sum(v) / len(v) for v in loads.values()] or [0.0]
    mean = sum(means) / len(means)
    hit = _ratio(last.cached_tokens - first.cached_tokens, last.prompt_tokens - first.prompt_tokens)
    available = _ratio(
        last.available_tokens - first.available_tokens,
        last.offered_tokens - first.offered_tokens,
    )
    return {
        "window_s": seconds,
        "requests_per_s": _ratio(last.requests - first.requests, seconds),
        "inflight_mean": sum(s.inflight for s in window) / len(window),
        "inflight_peak": float(peak),
        "at_plateau_share": sum(1 for s in window if peak and s.inflight >= 0.9 * peak)
        / len(window),
        "queued_mean": sum(s.queued for s in window) / len(window),
        "saturated_share": sum(1 for s in window if _saturated(s)) / len(window),
        "paused_share": _ratio(last.paused_s - first.paused_s, seconds),
        "load_spread": max(means) / mean if mean > 0 else None,
        "hit_ratio": hit,
        "reuse_available": available,
        "affinity_efficiency": hit / available if hit is not None and available else None,
        "stale_share": _ratio(
            last.stale_tokens - first.stale_tokens, last.rollout_tokens - first.rollout_tokens
        ),
        **_spread(window),
    }


def _spread(window: Sequence[Sample]) -> dict[str, float | None]:
    """How the window's requests spread over the replicas routable now (``_requests``): the
    busiest's share and its multiple of the mean; and the share of routing decisions that
    followed a key."""
    first, last = window[0], window[-1]
    counts = list(_requests(window).values())
    total = sum(counts)
    decided = {k: v - first.decisions.get(k, 0.0) for k, v in last.decisions.items()}
    keyed = _ratio(sum(decided.get(k, 0.0) for k in KEYED), sum(decided.values()))
    busiest = max(counts, default=0.0)
    mean = total / len(counts) if counts else 0.0
    return {
        "requests_busiest_share": _ratio(busiest, total) if len(counts) > 1 else None,
        "requests_spread": busiest / mean if len(counts) > 1 and mean > 0 else None,
        "keyed_share": keyed,
    }


def _requests(window: Sequence[Sample]) -> dict[str, float]:
    """The requests each replica routable now answered, over the end of the window in which
    all of them were routable (a replica that joined late is judged from when it joined)."""
    now = set(window[-1].replica_requests)
    start = len(window) - 1
    while start > 0 and now <= set(window[start - 1].replica_requests):
        start -= 1
    first, last = window[start], window[-1]
    return {r: last.replica_requests[r] - first.replica_requests[r] for r in sorted(now)}


def _concentration(window: Sequence[Sample], f: dict[str, float | None]) -> Advice | None:
    """Rule 6 over requests: ``concentrated`` (with why it is expected) or ``imbalanced``."""
    counts = _requests(window)
    total, spread = sum(counts.values()), f["requests_spread"]
    if total < MIN_REQUESTS or spread is None or spread < IMBALANCE:
        return None
    busiest = max(counts, key=lambda r: counts[r])
    took = (
        f"{busiest} took {counts[busiest]:.0f} of the window's {total:.0f} requests "
        f"({counts[busiest] / total:.0%}; {len(counts)} replicas routable)"
    )
    if (f["keyed_share"] or 0.0) >= KEYED_SHARE:
        return Advice(
            "concentrated",
            f"{took}: expected, as prefix affinity keeps requests that share a prompt prefix "
            "(or a routing key) on one replica, whose KV cache then serves them, and the "
            "window's requests shared few (one prompt, a GRPO group); they spread when more "
            "prompts run at once. Nothing to change while that replica keeps up",
            f,
        )
    if (f["inflight_peak"] or 0.0) <= 1:
        return Advice(
            "concentrated",
            f"{took}: harmless, as the client sent one request at a time, so every replica "
            "was idle and the first won each tie; they spread when requests overlap",
            f,
        )
    return Advice(
        "imbalanced",
        f"{took} while not routed by prefix: check that every replica serves the models "
        "asked for (an adapter only one holds, different base models: /v1/models), and "
        "--load-factor / --load-slack",
        f,
    )


def advise(window: Sequence[Sample]) -> Advice:
    """The first rule that holds (module docstring), with the last sample's warnings."""
    advice = _verdict(window)
    warnings = window[-1].warnings if window else ()
    return replace(advice, warnings=warnings) if warnings else advice


def _verdict(window: Sequence[Sample]) -> Advice:
    if len(window) < MIN_SAMPLES:
        return Advice("warming-up", "not enough of the run seen yet", {})
    f = figures(window)
    inflight, peak = f["inflight_mean"] or 0.0, f["inflight_peak"] or 0.0
    if peak < 1 and not f["requests_per_s"]:
        return Advice("idle", "no traffic in the window", f)
    paused = f["paused_share"] or 0.0
    if paused >= SYNC_SHARE:
        knob = (
            "raise TRL's weight_sync_steps (adapters are pushed already)"
            if window[-1].pushing
            else "turn on adapter push (replicas with the adapter receiver, the proxy without "
            "--no-adapter-push), or raise TRL's weight_sync_steps"
        )
        return Advice(
            "sync-bound", f"weight syncs keep the fleet paused {paused:.0%} of the time: {knob}", f
        )
    stale = f["stale_share"] or 0.0
    if stale >= STALE_SHARE:
        return Advice(
            "stale-waste",
            f"{stale:.0%} of the rollout tokens went to rollouts answered after their version "
            "left the window (TRL drops them as too stale): lower TRL's max_inflight_tasks "
            f"(to about {peak * (1 - stale):.0f}; `python -m benchmarks fleet --what-if` finds "
            "the setting), or raise max_staleness",
            f,
        )
    if (f["saturated_share"] or 0.0) >= SATURATED_SHARE:
        return Advice(
            "generation-bound",
            "the replicas are full (requests wait for a slot or in vLLM's queue): add replicas",
            f,
        )
    if (f["at_plateau_share"] or 0.0) >= PLATEAU_SHARE and (f["queued_mean"] or 0.0) == 0:
        return Advice(
            "client-concurrency-bound",
            f"the client keeps about {peak:.0f} requests in flight and the replicas have room: "
            f"raise TRL's max_inflight_tasks (e.g. to {2 * peak:.0f})",
            f,
        )
    spread = f["load_spread"]
    if spread is not None and spread >= IMBALANCE and inflight >= 2:
        return Advice(
            "imbalanced",
            f"one replica carries {spread:.1f}x the mean load: check routing spills and "
            "--load-factor / --load-slack (or explicit routing keys piling on one replica)",
            f,
        )
    concentration = _concentration(window, f)
    if concentration is not None:
        return concentration
    efficiency, available = f["affinity_efficiency"], f["reuse_available"]
    if (
        efficiency is not None
        and available is not None
        and available >= MIN_REUSE
        and efficiency < POOR_EFFICIENCY
    ):
        return Advice(
            "cache-poor",
            f"routing captures {efficiency:.0%} of the prefix reuse available "
            f"({available:.0%} of prompt tokens): use --policy prefix, and check spills",
            f,
        )
    return Advice("balanced", "no bottleneck found in the window", f)


def advise_run(window: Sequence[Sample], run: str) -> Advice:
    """``run``'s own verdict (module docstring), from the samples since it was declared."""
    seen = [
        replace(
            s,
            inflight=r.inflight,
            queued=r.queued,
            requests=r.requests,
            paused_s=0.0,
            prompt_tokens=0.0,
            cached_tokens=0.0,
            offered_tokens=0.0,
            available_tokens=0.0,
            rollout_tokens=r.rollout_tokens,
            stale_tokens=r.stale_tokens,
            replica_requests={},
            decisions={},
            runs={},
            warnings=r.warnings,
        )
        for s in window
        if (r := s.runs.get(run)) is not None
    ]
    return advise(seen)
