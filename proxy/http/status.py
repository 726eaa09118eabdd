"""What the proxy says of itself, read across its rooms in one place: the ``/proxy/status``
page (its ``runs`` section too, also the admin API's list of runs), the advisor's samples
(``insight.sampler``), the scrape-time gauges' sources (``metrics.collector.StateSources``) and
each run's figures (``RunView``). Reads only; every figure has its owner elsewhere.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy import __version__
from proxy.adapters.service import AdapterService
from proxy.adapters.watcher import Watcher
from proxy.clock import Clock
from proxy.dataplane.forward import Forwarder
from proxy.dataplane.limiter import Limiter
from proxy.fleet import views
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.shares import RunShares
from proxy.fleet.sync import FleetSync
from proxy.insight.advisor import VERDICTS, Advice, RunSample, Sample
from proxy.insight.scaler import ScalerReports
from proxy.metrics.collector import StateSources
from proxy.metrics.recorder import Metrics, Rollouts
from proxy.routing.policy import Policy
from proxy.runs.run import DEFAULT, Run
from proxy.runs.table import Runs, RunView
from proxy.supervise import restarts_so_far


@dataclass(slots=True)
class Status:
    pool: ReplicaPool
    fleet: FleetSync
    limiter: Limiter
    forwarder: Forwarder
    adapters: AdapterService
    metrics: Metrics
    policy: Policy
    clock: Clock
    queue_limit: int  # --queue-size
    runs: Runs = field(default_factory=Runs)  # several runs on one fleet (``proxy.runs``)
    shares: RunShares | None = None  # the runs' shares of max_loras, as the pool last told
    watcher: Watcher | None = None  # the adapter source's watcher (None: no source)
    scaler: ScalerReports = field(default_factory=ScalerReports)  # the run's scaler's reports
    started: float = field(init=False)  # when the proxy was assembled, by ``clock`` (uptime)

    def __post_init__(self) -> None:
        self.started = self.clock.monotonic()

    def sample(self) -> Sample:
        """The run now, for the advisor's window."""
        totals = self.metrics.totals()
        routable = self.pool.routable()
        rollouts = self.rollouts()
        short = self.shares.warnings() if self.shares is not None else {}
        return Sample(
            at=self.clock.monotonic(),
            inflight=self.limiter.inflight,
            queued=self.limiter.queued,
            replica_inflight={r.id: r.inflight for r in routable},
            replica_waiting={r.id: r.reported.waiting for r in routable if r.reported is not None},
            replica_kv={r.id: r.reported.kv_usage for r in routable if r.reported is not None},
            replica_requests=self.metrics.replica_requests(tuple(r.id for r in routable)),
            decisions=self.metrics.decisions(),
            pushing=self.adapters.pushing,
            runs={
                run.name: RunSample(
                    self.limiter.inflight_of(run),
                    self.limiter.queued_of(run),
                    run.requests,
                    rollouts[run.name].tokens,
                    rollouts[run.name].stale_tokens,
                    (short[run.name],) if run.name in short else (),
                )
                for run in self.runs
            },
            rollout_tokens=rollouts[DEFAULT.name].tokens,
            stale_tokens=rollouts[DEFAULT.name].stale_tokens,
            requests=totals["requests"],
            paused_s=self.fleet.paused_seconds(),
            prompt_tokens=totals["prompt"],
            cached_tokens=totals["cached"],
            offered_tokens=totals["offered"],
            available_tokens=totals["available"],
            warnings=tuple(self.warnings()),
        )

    def warnings(self) -> list[str]:
        """What is wrong now that the proxy cannot fix: an adapter directory that does not
        exist (yet), a run whose share of max_loras is short of TRL's need. Each in one line."""
        missing = self.watcher.warnings() if self.watcher is not None else []
        short = self.shares.warnings() if self.shares is not None else {}
        return [*missing, *short.values()]

    def source(self) -> dict[str, Any] | None:
        """The adapter source as its watcher last saw it (None: the proxy has none)."""
        watcher = self.watcher
        if watcher is None:
            return None
        return {
            "source": watcher.source.describe(),
            "missing": watcher.missing or None,
            "error": watcher.last_error or None,
            "versions": len(watcher.known),
        }

    def rollouts(self) -> dict[str, Rollouts]:
        """Rollouts answered and the stale ones: the default run's (``""``) and each run's."""
        return {name: self.metrics.rollouts(name) for name in (DEFAULT.name, *self.runs.names())}

    def inflight_by_version(self) -> dict[str, int]:
        return self.forwarder.inflight_by_version(self.adapters.versions)

    def sources(self, advice: Callable[[], Advice] | None) -> StateSources:
        """Where the scrape-time gauges read; ``advice``: the sampler's, if one runs."""
        limiter = self.limiter
        return StateSources(
            inflight=lambda: limiter.inflight,
            max_inflight=limiter.overall_cap,
            queued=lambda: limiter.queued,
            queue_limit=lambda: self.queue_limit,
            routing=self.policy.stats,
            adapters=self.adapters.stats,
            paused_seconds=self.fleet.paused_seconds,
            inflight_by_version=self.inflight_by_version,
            policy_alarm=lambda: int(self.adapters.check.alarm(self.adapters.statuses)),
            mismatches=lambda: dict(self.adapters.check.mismatches),
            policies=self.policies,
            advice=(lambda: advice().verdict) if advice is not None else str,
            verdicts=VERDICTS,
            scaler=self.scaler.replicas,
        )

    def policy_alarm(self) -> int:
        return int(self.adapters.check.alarm(self.adapters.statuses))

    def policies(self) -> list[tuple[str, str, str, str]]:
        """(replica, adapter, digest, state) of every replica's wanted versions (the metrics)."""
        table = self.adapters.check.status(self.adapters.statuses.by_id())["replicas"]
        return [
            (rid, name, entry["digest"], entry["state"])
            for rid, versions in table.items()
            for name, entry in versions.items()
        ]

    def held(self, run: Run) -> list[str]:
        """The run's adapters the fleet is to hold (replica-side names)."""
        registry = self.adapters.registry
        return [name for name in registry.versions if registry.run_of(name) is run]

    def run_views(self, advice: dict[str, Advice]) -> list[RunView]:
        """Each declared run as ``/metrics`` and ``/proxy/status`` show it (``advice``: the
        advisor's verdict on each run)."""
        max_loras = self.adapters.registry.max_loras
        short = self.shares.warnings() if self.shares is not None else {}
        return [
            RunView(
                run.name,
                run.weight,
                run.paused,
                run.pauses,
                len(self.held(run)),
                run.share(max_loras) if max_loras is not None else None,
                run.requests,
                self.limiter.inflight_of(run),
                self.limiter.queued_of(run),
                advice[run.name].as_dict() if run.name in advice else None,
                short.get(run.name),
            )
            for run in self.runs
        ]

    def runs_page(self, advice: dict[str, Advice]) -> dict[str, Any]:
        """``/proxy/status``'s ``runs`` (and the admin API's list): each declared run."""
        return {view.name: view.as_dict() for view in self.run_views(advice)}

    def replica_pages(self) -> list[dict[str, Any]]:
        """Each replica as ``views.replica_status`` shows it, with the prompt tokens it was sent
        and those its prefix cache served (what the scaler weighs before retiring one)."""
        usage = self.metrics.replica_usage()
        empty = {"prompt_tokens": 0.0, "cached_tokens": 0.0}
        return [{**views.replica_status(r), **usage.get(r.id, empty)} for r in self.pool]

    def page(
        self, advice: Advice | None, run_advice: dict[str, Advice], **edge: int
    ) -> dict[str, Any]:
        """The ``/proxy/status`` document; ``edge``: the HTTP edge's own figures."""
        uptime = self.clock.monotonic() - self.started
        fleet, limiter = self.fleet, self.limiter
        paused = fleet.paused_seconds()
        return {
            "version": __version__,
            "policy": self.policy.name,
            "routing": self.policy.stats(),
            "inflight": limiter.inflight,
            "queued": limiter.queued,
            "max_inflight": limiter.overall_cap(),
            "max_inflight_per_replica": limiter.per_replica,
            "paused": fleet.paused,
            "adapters": self.adapters.status(),
            "adapter_source": self.source(),
            "warnings": self.warnings(),
            "replicas": self.replica_pages(),
            "tasks": len(asyncio.all_tasks()),
            "pid": os.getpid(),
            "uptime_s": round(uptime, 3),
            "quality": self.metrics.quality(),
            "syncs": {
                "pause": "forwarded" if fleet.forward_pause else "answered",
                "open": fleet.syncing,
                "count": fleet.syncs,
                "last_s": fleet.last_window_s,
                "paused_s": round(paused, 3),
                "paused_share": paused / uptime if uptime > 0 else None,
            },
            "advice": advice.as_dict() if advice is not None else None,
            "inflight_by_version": self.inflight_by_version(),
            "rollouts": {run: c.as_dict() for run, c in self.rollouts().items()},
            "restarts": restarts_so_far(),
            "scaler": self.scaler.page(self.clock.monotonic()),
            **edge,
            # Declared runs only: a single-run proxy's page is as it was.
            **({"runs": self.runs_page(run_advice)} if self.runs else {}),
        }
