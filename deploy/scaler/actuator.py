"""The scaler's actuator: every ``poll_s`` it looks at the fleet and carries on what is under
way; every ``Policy.window_s`` it asks the decider and acts. Level-triggered: each pass starts
from what the Jobs API and the proxy say now, so a missed pass, a restart or a duplicate is
repaired by the next one, and a restarted scaler adopts the replica jobs that exist.

A pass (``tick``):
1. observe: the run's replica jobs (by label), each mapped to the proxy's replica by its own
   alias (``deploy.scaler.fleet``), and the proxy's status;
2. adopt: a live job the scaler launched that its state does not know (a restarted trainer, a
   lost state file) is settled if routed, else a launch under way (from its creation time; one
   created longer ago than the ready bound gets the bound again from now, its start-up not
   measured), and counts towards the hourly launches;
3. carry on: a launch now routed is settled and its start-up (launch -> routed) goes into the
   decider's ``History.started``; a launch not routed within ``ready_timeout_s``, or ended
   before, is cancelled, counted (``failed``), and told to the decider (``History.failed``: its
   back-off), never relaunched as such; a retiring replica is drained at the proxy again
   (idempotent: a restarted proxy forgets), and cancelled once nothing is in flight there or
   ``drain_timeout_s`` passed (a stream then cut continues on another replica);
4. every window: the trainer's figures (``Signals``), the fleet and the proxy's verdict go to
   the decider; what it decides passes the guard (``deploy.scaler.guard``: the bounds hold
   whatever the decider says); launches use the replicas' spec as ``deploy up`` launched them,
   the next free index, the run's labels and ``SCALED_LABEL``, the trainer job's secrets by
   name; a retire drains the replica whose loss costs the least cached prefix;
5. the decision, its reason and the fleet's counts go to the log (one line) and to the proxy
   (``/admin/scaler``); the state is saved when it changed (at most once a pass: it is a file
   in the bucket).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from deploy.jobs import HUB_ERRORS, HubJobs, JobView
from deploy.scaler import guard
from deploy.scaler.config import ScalerConfig
from deploy.scaler.decide import HOUR_S, Bounds, Decision, History, Policy, Window, decide
from deploy.scaler.fleet import Fleet, Member, observe, proxy_replicas
from deploy.scaler.proxy_calls import ProxyCalls, ProxyUnavailable
from deploy.scaler.report import describe, report
from deploy.scaler.state import MemoryState, ScalerState
from deploy.specs import RUN_LABEL, SCALED_LABEL, replica_alias

log = logging.getLogger("deploy.scaler")

Decider = Callable[[Window, History, Bounds, Policy], Decision]
Resolver = Callable[[str], Sequence[str]]  # a host name -> its addresses
POLL_S = 10.0  # how often launches and drains are looked at, between decisions


@dataclass(frozen=True)
class Measured:
    """The trainer's figures over the window just ended (``Signals.measure``)."""

    waited: float  # share of the window it waited for samples, 0..1
    remaining_s: float | None = None  # the run's time left at the window's pace
    dropped_stale: float | None = None  # TRL's sample/dropped_stale_total so far (beside)


class Signals(Protocol):
    def measure(self, now: float) -> Measured:
        """The figures since the last call (the first call: since the trainer started)."""
        ...


class Store(Protocol):
    def load(self) -> ScalerState: ...

    def save(self, state: ScalerState) -> None: ...


class Scaler:
    def __init__(
        self,
        config: ScalerConfig,
        jobs: HubJobs,
        proxy: ProxyCalls,
        signals: Signals,
        *,
        secrets: Mapping[str, str],
        resolve: Resolver,
        prefix: str,
        clock: Callable[[], float],
        decider: Decider = decide,
        store: Store | None = None,
    ) -> None:
        """``prefix``: the group's ``$HF_NETWORK_GROUP_PREFIX``; ``clock``: seconds since the
        epoch (the Jobs API's creation times are, and a restarted scaler reads its state)."""
        self.config, self.jobs, self.proxy, self.signals = config, jobs, proxy, signals
        self.secrets, self.resolve, self.prefix = secrets, resolve, prefix
        self.clock, self.decider = clock, decider
        self.store = store or MemoryState()
        self.state = self.store.load()
        self._saved = self.state.as_data()  # written only when it changes (a bucket write)
        self.bounds = config.bounds()
        self.policy = config.scaling.policy
        self.next_decision_at: float | None = None
        self.launched_now: list[JobView] = []  # this decision's launches

    def tick(self) -> Decision | None:
        """One pass (module docstring); the decision, when this pass decided."""
        now = self.clock()
        if self.next_decision_at is None:  # the first window starts now
            self.next_decision_at = now + self.policy.window_s
            self.signals.measure(now)
        status = self.proxy.status()
        fleet = self.observe(status)
        self.adopt(fleet, now)
        if self.carry_on(fleet, status, now):
            status = self.proxy.status()
            fleet = self.observe(status)
        decision = None
        if now >= self.next_decision_at:
            self.next_decision_at = now + self.policy.window_s
            decision = self.decide(fleet, status, now)
        data = self.state.as_data()
        if data != self._saved:
            self.store.save(self.state)
            self._saved = data
        return decision

    def observe(self, status: Mapping[str, Any]) -> Fleet:
        views = self.jobs.labelled(RUN_LABEL, self.config.run_name)
        addresses = {
            view.index: self._addresses(view.index)
            for view in views
            if view.role == "replica" and not view.terminal
        }
        replicas = proxy_replicas(status)
        return observe(views, replicas, addresses, self.config.port, self.state.retiring)

    def _addresses(self, index: int) -> Sequence[str]:
        try:
            return self.resolve(f"{self.prefix}{replica_alias(index)}")
        except OSError:  # not in the group's DNS yet (scheduling), or gone
            return ()

    def adopt(self, fleet: Fleet, now: float) -> None:
        """The scaler's own live jobs its state does not know (module docstring, 2)."""
        state = self.state
        for member in fleet.members:
            job = member.job
            if not job.scaled:
                continue
            launched = job.created_at if job.created_at is not None else now
            if now - launched < HOUR_S:
                state.launched.setdefault(job.id, launched)
            known = job.id in state.pending or job.id in state.settled or job.id in state.retiring
            if not member.live or known:
                continue
            if member.ready:
                state.settled.append(job.id)
            elif now - launched > self.config.ready_timeout_s:
                # Launched too long ago to judge (ready once and now run again by HF Jobs, or
                # stuck): the ready bound starts again now, and its start-up is not measured.
                state.pending[job.id] = now
                state.unmeasured.append(job.id)
            else:
                state.pending[job.id] = launched
                log.info("scaler: adopted %s (job %s), launched %.0f s ago, not routed yet",
                         job.name, job.id, now - launched)  # fmt: skip
        live = {member.job.id for member in fleet.live}
        state.settled = [job for job in state.settled if job in live]
        state.launched = {j: at for j, at in state.launched.items() if now - at < HOUR_S}

    def carry_on(self, fleet: Fleet, status: Mapping[str, Any], now: float) -> bool:
        """Launches and retirements under way (module docstring, 3); whether a job was
        cancelled (the fleet changed)."""
        changed = False
        for job_id, launched in list(self.state.pending.items()):
            changed |= self._launch_under_way(fleet.by_id(job_id), job_id, launched, now)
        for job_id, since in list(self.state.retiring.items()):
            changed |= self._retire_under_way(fleet.by_id(job_id), job_id, since, now)
        return changed

    def _launch_under_way(
        self, member: Member | None, job_id: str, launched: float, now: float
    ) -> bool:
        state = self.state
        if member is not None and member.ready:
            del state.pending[job_id]
            state.settled.append(job_id)
            if job_id in state.unmeasured:
                state.unmeasured.remove(job_id)
            else:
                state.history = state.history.started(now - launched)
            log.info("scaler: %s (job %s) is routed %.0f s after its launch", member.job.name,
                     job_id, now - launched)  # fmt: skip
            return False
        ended = member is not None and not member.live
        late = now - launched > self.config.ready_timeout_s
        if not (ended or late):
            return False
        del state.pending[job_id]
        if job_id in state.unmeasured:
            state.unmeasured.remove(job_id)
        state.failed += 1
        state.history = state.history.failed(now)
        name = member.job.name if member is not None else job_id
        if ended:
            assert member is not None
            log.warning("scaler: %s (job %s) ended in %s before it was routed: counted as a "
                        "failed launch, not relaunched (its logs: hf jobs logs %s)",
                        name, job_id, member.job.stage, job_id)  # fmt: skip
            return False
        self._cancel(job_id, name)
        log.warning("scaler: %s (job %s) not routed %.0f s after its launch (bound %.0f s, "
                    "--ready-timeout): cancelled, counted as a failed launch, not relaunched "
                    "(its logs: hf jobs logs %s)", name, job_id, now - launched,
                    self.config.ready_timeout_s, job_id)  # fmt: skip
        return True

    def _retire_under_way(
        self, member: Member | None, job_id: str, since: float, now: float
    ) -> bool:
        if member is None or not member.live:
            del self.state.retiring[job_id]
            return False
        replica = member.replica
        if replica is not None and not replica.draining:
            self.proxy.drain(replica.id)  # again: the proxy may have restarted since
        inflight = replica.inflight if replica is not None else 0
        late = now - since > self.config.scaling.drain_timeout_s
        if inflight and not late:
            return False
        self._cancel(job_id, member.job.name)
        cut = f", {inflight} request(s) still in flight (cut: they fail over)" if inflight else ""
        log.info("scaler: %s (job %s) retired: drained for %.0f s%s, cancelled",
                 member.job.name, job_id, now - since, cut)  # fmt: skip
        return True

    def _cancel(self, job_id: str, name: str) -> None:
        try:
            self.jobs.cancel(job_id)
        except HUB_ERRORS as exc:  # the next pass tries again while the job lives
            log.warning("scaler: cancelling %s (job %s) failed (%s): tried again next pass",
                        name, job_id, exc)  # fmt: skip

    def decide(self, fleet: Fleet, status: Mapping[str, Any], now: float) -> Decision:
        measured = self.signals.measure(now)
        advice = status.get("advice")
        window = Window(
            at=now,
            waited=measured.waited,
            ready=fleet.ready,
            starting=fleet.starting,
            draining=fleet.draining,
            verdict=advice.get("verdict") if isinstance(advice, dict) else None,
            remaining_s=measured.remaining_s,
        )
        # The launches the decider reads are the state's (adopted ones included), not the
        # ones kept with the last decision.
        recent = tuple(guard.recent(self.state.launched.values(), now))
        before = replace(self.state.history, launches=recent)
        decision = self.decider(window, before, self.bounds, self.policy)
        self.launched_now = []
        launches = list(self.state.launched.values())
        allowed, why = guard.admitted(decision, fleet, self.bounds, launches, now)
        done = self._act(decision.action, allowed, fleet, status, now)
        history = replace(decision.history, launches=tuple(guard.recent(
            self.state.launched.values(), now)))  # fmt: skip
        if decision.action != "hold" and done == 0:  # nothing changed: no cooldown from it
            history = replace(history, last_change_at=before.last_change_at, added=before.added)
        self.state.history = history
        self.state.cached = {r.id: r.cached_tokens for r in proxy_replicas(status)}
        self._tell(decision, done, why, fleet, measured, now)
        return decision

    def _act(
        self, action: str, allowed: int, fleet: Fleet, status: Mapping[str, Any], now: float
    ) -> int:
        if action == "add":
            self.launched_now = [
                job
                for n in range(allowed)
                if (job := self._launch(fleet.next_index + n, now)) is not None
            ]
            return len(self.launched_now)
        if action != "retire":
            return 0
        previous = self.state.cached
        cached = {r.id: r.cached_tokens - previous.get(r.id, r.cached_tokens)
                  for r in proxy_replicas(status)}  # fmt: skip
        done = 0
        for _ in range(allowed):
            member = guard.least_loss(fleet, cached)
            if member is None or member.replica is None:
                break
            self.proxy.drain(member.replica.id)
            self.state.retiring[member.job.id] = now
            fleet = Fleet(tuple(replace(m, retiring=m.retiring or m is member)
                                for m in fleet.members))  # fmt: skip
            rid = member.replica.id
            log.info("scaler: retiring %s (job %s): draining replica %s (its cache served %.0f "
                     "prompt tokens in the last window, the least)", member.job.name,
                     member.job.id, rid, cached.get(rid, 0.0))  # fmt: skip
            done += 1
        return done

    def _launch(self, index: int, now: float) -> JobView | None:
        config = self.config
        spec = config.replica.numbered(config.run_name, index, scaling=True)
        spec = replace(spec, labels={**spec.labels, SCALED_LABEL: config.run_name})
        missing = [name for name in spec.secret_names if not self.secrets.get(name)]
        if missing:
            log.error("scaler: cannot launch %s: the trainer job lacks the secret(s) %s a replica "
                      "is launched with (deploy up gives them with --replica-count MIN..MAX)",
                      spec.name, ", ".join(missing))  # fmt: skip
            return None
        try:
            job = self.jobs.launch(spec, self.secrets)
        except HUB_ERRORS as exc:
            log.warning("scaler: launching %s failed (%s): the next window decides again",
                        spec.name, exc)  # fmt: skip
            return None
        self.state.launched[job.id] = now
        self.state.pending[job.id] = now
        log.info("scaler: launched %s (job %s, %s)", spec.name, job.id, spec.flavor)
        return job

    def _tell(
        self, decision: Decision, done: int, why: str | None, fleet: Fleet,
        measured: Measured, now: float,
    ) -> None:  # fmt: skip
        fleet_now = self.observe_after(fleet)
        doc = report(decision, done, why, fleet_now, measured, self.state, self.bounds, now,
                     self.launched_now)  # fmt: skip
        self.state.last = doc
        log.info("scaler: %s", describe(doc))
        try:
            self.proxy.report(doc)
        except ProxyUnavailable as exc:
            log.warning("scaler: the proxy did not take the decision's report (%s)", exc)

    def observe_after(self, fleet: Fleet) -> Fleet:
        """The fleet as this pass left it, the retirements it began counted as draining."""
        retiring = self.state.retiring
        return Fleet(tuple(replace(m, retiring=m.job.id in retiring) for m in fleet.members))
