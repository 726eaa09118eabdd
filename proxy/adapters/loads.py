"""The fleet loads under way (TRL's loads, the watcher's preloads): one intent per name
(``intent``), each settled from the replicas' statuses by the service's watch.

- ``intend``: the version is wanted (the registry, pinned against the window while it loads),
  its deadline and pushes are set in the spec for the agents to read, and an intent waits for the
  replicas routable now; a load of a name still loading joins it (same files) or waits for its
  end.
- ``settle`` (the watch, after any change): each intent answered once its targets' statuses
  allow (``Intent.settle``); a failed one rolled back (the previous files wanted again, or the
  name dropped) and answered once every target that owed the rollback has carried it out.
  Counted as they end (``rollout_proxy_fleet_load_seconds`` and the per-replica load figures).

The one owner of the intents; every change it makes to the spec wakes the agents and the watch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Container
from dataclasses import replace

from adapter_receiver.wire import shown
from proxy.adapters.agents import Agents
from proxy.adapters.carry import Carrier, LoadOutcome
from proxy.adapters.intent import Intent
from proxy.adapters.registry import Version
from proxy.adapters.spec import Spec
from proxy.adapters.status import Statuses
from proxy.clock import Timer
from proxy.fleet.pool import ReplicaPool
from proxy.metrics.recorder import Metrics

log = logging.getLogger("proxy.adapters")

# A load's targets that have not answered this long after its deadline count as unreachable (the
# margin lets an agent's own answer at the deadline, a lagging mount's 504, come first).
OVERDUE_AFTER_S = 1.0


class Loads:
    def __init__(
        self,
        spec: Spec,
        statuses: Statuses,
        agents: Agents,
        pool: ReplicaPool,
        carrier: Carrier,
        metrics: Metrics,
    ) -> None:
        self._spec, self._statuses, self._agents = spec, statuses, agents
        self._pool, self._carrier, self._metrics = pool, carrier, metrics
        self._intents: dict[str, Intent] = {}
        self._timers: dict[Intent, Timer] = {}  # each intent's deadline

    def __contains__(self, name: object) -> bool:
        return name in self._intents

    def __len__(self) -> int:
        return len(self._intents)

    def names(self) -> list[str]:
        return sorted(self._intents)

    async def intend(self, version: Version) -> Intent:
        """The intent under way for these files, else a new one once the name's has ended."""
        while (pending := self._intents.get(version.name)) is not None:
            if pending.version.same_files(version):
                return pending
            await asyncio.shield(pending.done)
        registry = self._spec.registry
        wanted = registry.wanted(version.name)
        if wanted is not None and wanted.same_files(version):
            version = replace(wanted, files=wanted.files or version.files)  # the watcher's record
        self._spec.adopted.unvouched.discard(version.name)
        registry.add(version, pinned={*self._intents, version.name})
        targets = self._pool.routable()
        held = {r.id for r in targets if self._agents.status_of(r).same(version)}
        counts = Intent.counts(self._statuses, targets, version.name)
        loop, carrier = asyncio.get_running_loop(), self._carrier
        intent = Intent(
            version, wanted, targets, counts, carrier.deadline(), time.perf_counter(),
            loop.create_future(),
        )  # fmt: skip
        for replica in targets:
            if replica.id in held:
                intent.outcomes[replica.id] = LoadOutcome(replica, "ok", None, 0)
        self._intents[version.name] = intent
        need = [r for r in targets if r.id not in held]
        self._spec.loading(version, intent.deadline, carrier.push(version, need))
        late_s = carrier.retry.deadline_s + OVERDUE_AFTER_S
        self._timers[intent] = carrier.clock.call_later(late_s, lambda: self._expire(intent))
        self._changed()
        return intent

    def settle(self, routable: Container[str]) -> None:
        """Each intent as the statuses now allow (the module docstring)."""
        for intent in list(self._intents.values()):
            self._settle(intent, routable)

    def _settle(self, intent: Intent, routable: Container[str]) -> None:
        name, spec = intent.version.name, self._spec
        if intent.undo is not None:
            if intent.undone(self._statuses, routable, lambda status: spec.owes(status, name)):
                self._finish(intent)
            return
        wanted = spec.registry.wanted(name)
        superseded = wanted is None or not wanted.same_files(intent.version)
        if not intent.settle(self._statuses, routable, superseded):
            return
        if intent.expired:
            for replica in intent.late():
                log.warning("replica %s did not answer the load of %s within the deadline: "
                            "answered without it (routed for it once it holds it)", replica.id,
                            shown(name))  # fmt: skip
        self._end(intent)

    def _expire(self, intent: Intent) -> None:
        intent.expire()
        self._statuses.poke()

    def _end(self, intent: Intent) -> None:
        """Every target answered: keep the version, or roll it back and wait for the undo."""
        version, spec = intent.version, self._spec
        spec.loaded(version)
        timer = self._timers.pop(intent, None)
        if timer is not None:
            timer.cancel()
        if intent.ok:
            self._finish(intent)
            return
        previous = intent.previous
        if previous is not None and not previous.same_files(version):
            spec.registry.add(previous, pinned=self._intents)
        else:
            spec.registry.remove(version.name)
        owing = [
            r for r in intent.targets
            if r.routable and spec.owes(self._agents.status_of(r), version.name)
        ]  # fmt: skip
        intent.rolled_back(self._statuses, owing)
        if intent.undo:
            self._changed()
        else:
            self._finish(intent)

    def _finish(self, intent: Intent) -> None:
        name = intent.version.name
        if self._intents.get(name) is intent:
            del self._intents[name]
        self._spec.registry.trim(name, pinned=self._intents)
        self._count(intent)
        if not intent.done.done():
            intent.done.set_result(intent.ordered())
        self._changed()

    def _count(self, intent: Intent) -> None:
        outcomes, seconds = intent.ordered(), time.perf_counter() - intent.started
        metrics = self._metrics
        metrics.record_fleet_load(seconds, "ok" if intent.ok else "failed")
        paths = {o.via for o in outcomes if o.attempts and o.status == "ok"}
        if intent.ok and paths:
            metrics.record_fleet_sync(paths.pop() if len(paths) == 1 else "mixed", seconds)
        for o in outcomes:
            if o.attempts:
                metrics.record_adapter_load(o.replica.id, o.status, o.attempts, o.seconds)

    def _changed(self) -> None:
        """The spec changed: every agent looks again, and the watch evaluates."""
        self._agents.wake_all()
        self._statuses.poke()

    def close(self) -> None:
        """No answer comes any more: each load's waiters are cancelled, its pushes too."""
        for intent in self._intents.values():
            self._spec.loaded(intent.version)
            intent.done.cancel()
        for timer in self._timers.values():
            timer.cancel()
