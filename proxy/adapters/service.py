"""The adapter service: TRL's calls and the source's findings as desired state (``registry``),
carried out on each replica by that replica's agent (``agent``). No aiohttp: the edge answers.

- ``load``: the version is wanted and an intent (``intent``) waits for every replica routable
  now, all or nothing; a failure rolls the registry back and the answer comes once the agents
  have undone it. A load of a name still loading joins it (same files) or waits for its end.
- ``unload``: no longer wanted; answered at once (TRL ignores the answer, but its round trip
  counts in ``perf/weight_sync_s``); an unload of a name still loading follows that load's end.
- ``source_changed``: what a watcher found is wanted (pre-loaded); a directory gone is dropped.
- ``admit`` / ``resync`` / ``out_of_step``: a replica's agent observes it afresh.
- ``adopt``: the wanted versions a previous process of this proxy left (``state``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Container, Coroutine
from dataclasses import replace
from typing import Any

from adapter_receiver.wire import shown
from proxy.adapters.agents import Agents
from proxy.adapters.calls import LoadResult, UnloadResult, parse_adapter_request
from proxy.adapters.carry import Carrier, Outcome
from proxy.adapters.held import Held, Verdict
from proxy.adapters.intent import Intent
from proxy.adapters.origin import Origins
from proxy.adapters.policy import Found, PolicyCheck
from proxy.adapters.registry import Command, Fingerprint, Load, Registry, Version, version_number
from proxy.adapters.state import Adopted, Saved, StateFile, StateWriter, snapshot
from proxy.clock import Failed
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics

log = logging.getLogger("proxy.adapters")

# On shutdown the unloads already answered get this long to reach the replicas (each call is
# bounded by carry.UNLOAD_TIMEOUT_S); what is left is cancelled.
UNLOAD_DRAIN_S = 10.0
# A load's targets that have not answered this long after its deadline count as unreachable (the
# margin lets an agent's own answer at the deadline, a lagging mount's 504, come first).
OVERDUE_AFTER_S = 1.0


class AdapterService:
    def __init__(
        self,
        registry: Registry,
        carrier: Carrier,
        pool: ReplicaPool,
        info: FleetInfo,
        metrics: Metrics,
        origins: Origins,
        policy: PolicyCheck,
        *,
        failed: Failed,
        has_source: bool,
        state: StateFile | None = None,
    ) -> None:
        self.registry, self._carrier, self._pool, self._info = registry, carrier, pool, info
        self.metrics, self.origins, self._failed, self.policy = metrics, origins, failed, policy
        self.has_source = has_source
        self.state = None if state is None else StateWriter(state, self._snapshot, failed)
        self._intents: dict[str, Intent] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.adopted = Adopted()  # what a previous process left (``state``)
        self._closing = False
        self.source_seen = False  # the source's first scan has been applied
        copies = self.adopted.copies
        self.agents = Agents(
            self, carrier, pool, info.refresh, failed, lambda rid: copies.pop(rid, {})
        )

    def knows(self, name: str) -> bool:
        return name in self.registry.versions or name in self._intents

    @property
    def versions(self) -> dict[str, Version]:
        return self.registry.versions

    @property
    def pushing(self) -> bool:
        return self._carrier.pusher is not None

    def roots(self) -> dict[str, str]:
        """Each wanted version's path as its client named it (``/v1/models`` shows these)."""
        return {name: version.path for name, version in self.registry.versions.items()}

    # -- TRL's calls ---------------------------------------------------------------------

    async def load(self, body: bytes) -> LoadResult:
        name, path = parse_adapter_request(body, need_path=True)
        await self._pool.wait_routable()  # TRL does not retry a load: a blip is waited out
        started = time.perf_counter()
        intent = await self._intend(await self.origins.of_load(name, path))
        outcomes = await asyncio.shield(intent.done)
        seconds = time.perf_counter() - started
        took = sum(1 for o in outcomes if o.status == "ok")
        if took and intent.ok:
            log.info("adapter %s loaded on %d replica(s) in %.2f s", shown(name), took, seconds)
        return LoadResult(intent.version, outcomes, seconds, self._carrier.retry.deadline_s)

    async def _intend(self, version: Version) -> Intent:
        """The intent under way for these files, else a new one once the name's has ended."""
        while (pending := self._intents.get(version.name)) is not None:
            if pending.version.same_files(version):
                return pending
            await asyncio.shield(pending.done)
        wanted = self.registry.wanted(version.name)
        if wanted is not None and wanted.same_files(version):
            version = replace(wanted, files=wanted.files or version.files)  # the watcher's record
        self.adopted.unvouched.discard(version.name)
        self.registry.add(version, pinned={*self._intents, version.name})
        targets = self._pool.routable()
        need = [r for r in targets if not self.agents.of(r).held.same(version)]
        loop = asyncio.get_running_loop()
        intent = Intent(
            version, wanted, targets, self._carrier.deadline(), time.perf_counter(),
            loop.create_future(), self._carrier.push(version, need),
        )  # fmt: skip
        self._intents[version.name] = intent
        late_s = self._carrier.retry.deadline_s + OVERDUE_AFTER_S
        intent.expire(self._carrier.clock, late_s, self._overdue)
        done = [intent.record(Outcome(r, "ok", None, 0)) for r in targets if r not in need]
        if any(done) or not targets:
            self._end(intent)
        else:
            self._changed()
        return intent

    async def unload(self, body: bytes) -> UnloadResult:
        name, _ = parse_adapter_request(body, need_path=False)
        known = self.knows(name) or self.registry.dropped(name)
        known = known or any(name in r.adapters for r in self._pool)
        intent = self._intents.get(name)
        if intent is not None:
            intent.then_unload = True  # after the load under way, as they arrived
        elif known:
            self._drop(name)
            self._changed()
        return UnloadResult(name, known)

    async def settled(self) -> None:
        """Until every agent has carried out what it can (the unloads answered so far)."""
        await self.agents.settled()

    # -- what the agents ask (``agent.Desired``) -----------------------------------------

    def plan(self, held: Held) -> list[Command]:
        manage = self.has_source and self.source_seen
        commands = self.registry.plan(held, manage_unknown=manage, loads=not self._closing)
        hides = self.adopted.hides
        return [c for c in commands if not (isinstance(c, Load) and hides(c.version.name))]

    def intent(self, name: str) -> Intent | None:
        return self._intents.get(name)

    def checks(self, held: Held) -> list[Version]:
        return self.policy.checks(held)

    async def verify(self, replica: Replica, version: Version) -> Found:
        found = await self.policy.verify(replica, version)
        for agent in self.agents:  # an answer may make another replica suspect
            if agent.replica is not replica and self.policy.checks(agent.held):
                agent.wake()
        return found

    def withheld(self, replica: Replica, version: Version) -> None:
        self.policy.withheld(replica, version)
        self._wake_all()  # the others may now serve it anyway (when none agrees)

    def ready(self, seconds: float) -> None:
        self.metrics.record_policy_wait(seconds)

    def servable(self, name: str, version: Version | None, verdict: Verdict | None) -> bool:
        return self.policy.servable(name, version, verdict, self.held_records().values())

    def held_records(self) -> dict[str, Held]:
        return self.agents.held_records()

    def offer_probe(self, prompt: bytes) -> None:
        """A token-id prompt the trainer sent (taken once: the probe without a reference)."""
        if self.policy.captured.offer(prompt):
            log.info("served-policy probe: %d token ids taken from the trainer's first prompt",
                     len(self.policy.captured.ids or ()))  # fmt: skip
            self._wake_all()

    def report(self, outcome: Outcome, version: Version) -> None:
        intent = self._intents.get(version.name)
        if intent is not None and intent.version.same_files(version) and intent.record(outcome):
            self._end(intent)

    def carried(self, replica: Replica, name: str) -> None:
        """``replica``'s agent carried out (or failed) a command for ``name``."""
        self._saved()
        intent = self._intents.get(name)
        if intent is not None and intent.undo is not None:
            intent.undo.discard(replica.id)
            if not intent.undo:
                self._finish(intent)

    def inactive(self, replica: Replica) -> None:
        """``replica`` left routing: its intents count it unreachable, undone without it."""
        for intent in list(self._intents.values()):
            if replica.id not in intent.outcomes:
                if intent.record(Outcome(replica, "unreachable", None, 0)):
                    self._end(intent)
            elif intent.undo is not None:
                self.carried(replica, intent.version.name)

    def observed(self, replica: Replica) -> None:
        """``replica`` was listed afresh: the window follows the fleet's ``max_loras``, and the
        listing vouches for adopted versions."""
        self.registry.max_loras = self._info.smallest_max_loras()
        for name in self.adopted.listed(replica.id, set(replica.adapters), set(self._pool.ids)):
            log.warning("adapter %s (from the state file): no replica holds it and its files "
                        "cannot be read here: dropped", shown(name))  # fmt: skip
            self.registry.remove(name)
        self._saved()

    def _overdue(self, intent: Intent) -> None:
        if self._intents.get(intent.version.name) is not intent or intent.undo is not None:
            return
        for replica in intent.overdue():
            log.warning("replica %s did not answer the load of %s within the deadline: answered "
                        "without it (routed for it once it holds it)", replica.id,
                        shown(intent.version.name))  # fmt: skip
        self._end(intent)

    def _end(self, intent: Intent) -> None:
        """Every target answered: keep the version, or roll it back and wait for the undo."""
        version = intent.version
        intent.cancel_pushes()
        if not intent.ok:
            if intent.previous is not None and not intent.previous.same_files(version):
                self.registry.add(intent.previous, pinned=self._intents)
            else:
                self.registry.remove(version.name)
            owing = [r for r in intent.targets if r.routable and self._owes(r, version.name)]
            intent.undo = {r.id for r in owing}
        if intent.undo:
            self._changed()
        else:
            self._finish(intent)

    def _owes(self, replica: Replica, name: str) -> bool:
        commands = self.plan(self.agents.of(replica).held)
        return any((c.version.name if isinstance(c, Load) else c.name) == name for c in commands)

    def _finish(self, intent: Intent) -> None:
        name = intent.version.name
        if self._intents.get(name) is intent:
            del self._intents[name]
        if intent.then_unload:
            self._drop(name)
        self.registry.trim(name, pinned=self._intents)
        intent.finish(self.metrics)
        self._changed()

    # -- the source and the replicas -----------------------------------------------------

    async def source_changed(
        self, added: dict[str, tuple[str, Fingerprint]], removed: list[str]
    ) -> None:
        gone = list(removed)
        if not self.source_seen:  # adopted versions of the source whose directory went away
            gone += [n for n, v in self.versions.items() if v.source == "bucket" and n not in added]
        for name in gone:
            if self.registry.wanted(name) is not None:
                log.info("adapter %s disappeared from the source: dropping it", shown(name))
                self._drop(name)
        for name, (path, files) in sorted(added.items(), key=lambda kv: _number(kv[0])):
            wanted = self.registry.wanted(name)
            if wanted is not None and wanted.same_files(Version(name, path, "bucket", files)):
                self.adopted.unvouched.discard(name)
                continue
            log.info("adapter %s found in the source: pre-loading it on every replica", shown(name))
            self._spawn(self._preload(name, path, files))
        self.source_seen = True  # leftovers on the replicas can be told apart now
        self._changed()

    async def _preload(self, name: str, path: str, files: Fingerprint) -> None:
        intent = await self._intend(await self.origins.of_source(name, path, files))
        await asyncio.shield(intent.done)

    async def admit(self, replica: Replica) -> bool:
        """Until ``replica`` holds the window (its agent observed it afresh)."""
        pusher = self._carrier.pusher
        if pusher is not None:  # it may have come back with or without a receiver
            pusher.forget(replica.id)
            await pusher.probe(replica)
        self.policy.forget(replica)  # it may have restarted: its probe answers start over
        ok = await self.agents.of(replica).admit()
        if ok:
            self.metrics.record_reconcile()
        return ok

    def resync(self, replica: Replica) -> None:
        self.agents.of(replica).wake(resync=True)

    @property
    def retired(self) -> Container[str]:
        """Versions that were in the window and are not any more (their rollouts are stale)."""
        return self.registry.retired

    def out_of_step(self, replica: Replica, name: str) -> None:
        log.warning("replica %s lost adapter %s (restarted?): reconciling it", replica.id,
                    shown(name))  # fmt: skip
        self.metrics.record_reconcile()
        self.agents.of(replica).lost(name)

    def _changed(self) -> None:
        """The wanted set changed: saved, and every agent looks again."""
        self._saved()
        self._wake_all()

    def _wake_all(self) -> None:
        self.agents.wake_all()

    def _drop(self, name: str) -> None:
        """No longer wanted: the proxy's own receiver drops its copies of ``name`` too."""
        self.registry.remove(name)
        store = self.origins.store
        if store is not None:
            self._spawn(asyncio.to_thread(store.drop, name))

    def _saved(self) -> None:
        if self.state is not None:
            self.state.changed()

    def adopt(self, saved: Saved) -> None:
        """Want what a previous process of this proxy wanted (each version's ``files`` where
        this proxy can read its bytes now, or None)."""
        self.adopted.adopt(saved, self.registry)

    def _snapshot(self) -> Saved:
        return snapshot(self.registry, self.held_records())

    # -- status and lifetime -------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        mirror = self.origins.mirror
        return {
            "wanted": len(self.registry.versions),
            "loading": len(self._intents),
            "newest": self.registry.newest() or 0,
            "mirroring": mirror.backlog if mirror is not None else 0,
        }

    def status(self) -> dict[str, Any]:
        pusher = self._carrier.pusher
        agents = [agent for agent in self.agents if agent.replica.routable]
        return {
            "window": self.registry.window,
            "wanted": sorted(self.registry.versions, key=_number),
            "loading": sorted(self._intents),
            "unloading": sum(not agent.idle.is_set() for agent in agents),
            "unloads_owed": sum(agent.parked_unloads() for agent in agents),
            "newest": self.registry.newest(),
            # Pushing on or off, and which replicas have a receiver (as last probed).
            "push": pusher is not None,
            "receivers": dict(pusher.receivers) if pusher is not None else {},
            "state": None if self.state is None else str(self.state.file.path),
            "policy": self.policy.status(self.held_records()),
        }

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(self._report)

    def _report(self, task: asyncio.Task[Any]) -> None:
        """A background task of ours ended with an exception: reported, never re-raised."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._failed("adapters", exc)

    async def close(self) -> None:
        """No load starts any more; the unloads answered already get ``UNLOAD_DRAIN_S``."""
        self._closing = True
        for intent in self._intents.values():
            intent.cancel_pushes()
            intent.done.cancel()
        await self.agents.close(UNLOAD_DRAIN_S)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.state is not None:
            await self.state.flush()


def _number(name: str) -> int:
    number = version_number(name)
    return number if number is not None else -1
