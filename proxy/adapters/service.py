"""The adapter service: TRL's calls and the source's findings as the fleet's spec (``spec``),
carried out on each replica by that replica's agent (``agent``), which writes its status
(``status``). No aiohttp: the edge parses the requests and answers; the service takes typed
requests (``calls``).

- ``load``: the version is wanted and an intent waits for every replica routable now, all or
  nothing (``loads``); a failure rolls the spec back and the answer comes once the agents have
  undone it. A load of a name still loading joins it (same files) or waits for its end.
- ``unload``: no longer wanted; answered at once (TRL ignores the answer, but its round trip
  counts in ``perf/weight_sync_s``). An unload of a name still loading is a change of the plan
  like any other: that load is answered as superseded, and no replica loads the name only to
  unload it.
- ``source_changed``: what a watcher found is wanted (pre-loaded); a directory gone is dropped.
- ``admit`` / ``resync`` / ``out_of_step``: a replica's agent observes it afresh.
- ``adopt``: the wanted versions a previous process of this proxy left (``state``).

``run`` is the service's watch (started by the app's lifecycle): whenever a status changes, the
pool's membership or routable set moves, or a load's deadline passes, it evaluates, level-
triggered: the window follows the fleet's smallest ``max_loras``; each replica's new listing
vouches for the adopted versions it holds; each intent is settled from the statuses (answered,
rolled back, or its rollback seen done); what each replica may serve is republished; the state
file is written. Nobody reports to it: it reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Container, Coroutine
from typing import Any

from adapter_receiver.wire import shown
from proxy.adapters.agent import Tools
from proxy.adapters.agents import Agents
from proxy.adapters.attest.check import ServedPolicyCheck
from proxy.adapters.calls import LoadRequest, LoadResult, UnloadResult
from proxy.adapters.carry import Carrier
from proxy.adapters.loads import Loads
from proxy.adapters.origin import Origins
from proxy.adapters.registry import Fingerprint, Registry, Version, version_number
from proxy.adapters.spec import Spec
from proxy.adapters.state import Saved, StateFile, StateWriter, snapshot
from proxy.adapters.status import ReplicaStatus, Statuses
from proxy.clock import TaskFailed
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics

log = logging.getLogger("proxy.adapters")

# On shutdown the unloads already answered get this long to reach the replicas (each call is
# bounded by carry.UNLOAD_TIMEOUT_S); what is left is cancelled.
UNLOAD_DRAIN_S = 10.0


class AdapterService:
    def __init__(
        self,
        registry: Registry,
        carrier: Carrier,
        pool: ReplicaPool,
        info: FleetInfo,
        metrics: Metrics,
        origins: Origins,
        check: ServedPolicyCheck,
        *,
        failed: TaskFailed,
        has_source: bool,
        state: StateFile | None = None,
    ) -> None:
        self.registry, self._carrier, self._pool, self._info = registry, carrier, pool, info
        self.metrics, self.origins, self._failed, self.check = metrics, origins, failed, check
        self.spec = Spec(registry, has_source)
        self.statuses = Statuses()
        self.state = None if state is None else StateWriter(state, self._snapshot, failed)
        self._background: set[asyncio.Task[Any]] = set()
        self._listings: dict[str, tuple[ReplicaStatus, int]] = {}  # vouched so far, by replica
        self._membership: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        copies = self.spec.adopted.copies
        tools = Tools(
            self.spec, self.statuses, carrier, check, pool, info.refresh,
            metrics.record_policy_wait, failed,
        )  # fmt: skip
        self.agents = Agents(tools, lambda rid: copies.pop(rid, {}))
        self.loads = Loads(self.spec, self.statuses, self.agents, pool, carrier, metrics)
        pool.follow(self._pool_changed)

    def knows(self, name: str) -> bool:
        return name in self.registry.versions or name in self.loads

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

    async def load(self, request: LoadRequest) -> LoadResult:
        name = request.name
        await self._pool.wait_routable()  # TRL does not retry a load: a blip is waited out
        started = time.perf_counter()
        intent = await self.loads.intend(await self.origins.of_load(name, request.path))
        outcomes = await asyncio.shield(intent.done)
        seconds = time.perf_counter() - started
        took = sum(1 for o in outcomes if o.status == "ok")
        if took and intent.ok:
            log.info("adapter %s loaded on %d replica(s) in %.2f s", shown(name), took, seconds)
        return LoadResult(intent.version, outcomes, seconds, self._carrier.retry.deadline_s)

    async def unload(self, name: str) -> UnloadResult:
        """``name`` is no longer wanted (a load of it under way is superseded)."""
        known = self.knows(name) or self.registry.dropped(name)
        known = known or any(name in r.adapters for r in self._pool)
        if known:
            self._drop(name)
            self._changed()
        return UnloadResult(name, known)

    async def settled(self) -> None:
        """Until every agent has carried out what it can (the unloads answered so far)."""
        await self.agents.settled()

    def offer_probe(self, prompt: bytes) -> None:
        """A token-id prompt the trainer sent (taken once: the probe without a reference)."""
        if self.check.captured.offer(prompt):
            log.info("served-policy probe: %d token ids taken from the trainer's first prompt",
                     len(self.check.captured.ids or ()))  # fmt: skip
            self.agents.wake_all()

    # -- the watch ------------------------------------------------------------------------

    async def run(self) -> None:
        """Evaluate after every change, for as long as the proxy runs; survives its own
        exceptions (see the module docstring)."""
        seen = -1
        while True:
            seen = await self.statuses.changes(seen)
            try:
                self._reconcile()
            except Exception as exc:
                self._failed("adapters", exc)

    def _reconcile(self) -> None:
        self.registry.max_loras = self._info.smallest_max_loras()
        self._vouch()
        self.loads.settle({r.id for r in self._pool.routable()})
        self.agents.republish()
        self._saved()

    def _vouch(self) -> None:
        """Each replica's new listing vouches for the adopted versions it holds; those every
        member was listed without are dropped."""
        adopted, members = self.spec.adopted, set(self._pool.ids)
        for status in self.statuses:
            then = self._listings.get(status.replica_id)
            if then is not None and then[0] is status and then[1] == status.listings:
                continue
            self._listings[status.replica_id] = (status, status.listings)
            if not status.listings:
                continue
            for name in adopted.listed(status.replica_id, set(status.listed), members):
                log.warning("adapter %s (from the state file): no replica holds it and its "
                            "files cannot be read here: dropped", shown(name))  # fmt: skip
                self.registry.remove(name)

    def _pool_changed(self, pool: ReplicaPool) -> None:
        membership = (pool.ids, tuple(r.id for r in pool.routable()))
        if membership != self._membership:
            self._membership = membership
            self.statuses.poke()

    # -- the source and the replicas -----------------------------------------------------

    async def source_changed(
        self, added: dict[str, tuple[str, Fingerprint]], removed: list[str]
    ) -> None:
        gone = list(removed)
        if not self.spec.source_seen:  # adopted versions of the source whose directory went
            gone += [n for n, v in self.versions.items() if v.source == "bucket" and n not in added]
        for name in gone:
            if self.registry.wanted(name) is not None:
                log.info("adapter %s disappeared from the source: dropping it", shown(name))
                self._drop(name)
        for name, (path, files) in sorted(added.items(), key=lambda kv: _number(kv[0])):
            wanted = self.registry.wanted(name)
            if wanted is not None and wanted.same_files(Version(name, path, "bucket", files)):
                self.spec.adopted.unvouched.discard(name)
                continue
            log.info("adapter %s found in the source: pre-loading it on every replica", shown(name))
            self._spawn(self._preload(name, path, files))
        self.spec.saw_source()
        self._changed()

    async def _preload(self, name: str, path: str, files: Fingerprint) -> None:
        intent = await self.loads.intend(await self.origins.of_source(name, path, files))
        await asyncio.shield(intent.done)

    async def admit(self, replica: Replica) -> bool:
        """Until ``replica`` holds the window (its agent observed it afresh)."""
        pusher = self._carrier.pusher
        if pusher is not None:  # it may have come back with or without a receiver
            pusher.forget(replica.id)
            await pusher.probe(replica)
        self.check.forget(replica)  # it may have restarted: its probe answers start over
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
        """The spec changed: every agent looks again, and the watch evaluates."""
        self.agents.wake_all()
        self.statuses.poke()

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
        self.spec.adopted.adopt(saved, self.registry)

    def _snapshot(self) -> Saved:
        return snapshot(self.registry, self.statuses.by_id())

    # -- status and lifetime -------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        mirror = self.origins.mirror
        return {
            "wanted": len(self.registry.versions),
            "loading": len(self.loads),
            "newest": self.registry.newest() or 0,
            "mirroring": mirror.backlog if mirror is not None else 0,
        }

    def status(self) -> dict[str, Any]:
        pusher = self._carrier.pusher
        agents = [agent for agent in self.agents if agent.replica.routable]
        return {
            "window": self.registry.window,
            "wanted": sorted(self.registry.versions, key=_number),
            "loading": self.loads.names(),
            "unloading": sum(not agent.idle.is_set() for agent in agents),
            "unloads_owed": sum(agent.parked_unloads() for agent in agents),
            "newest": self.registry.newest(),
            # Pushing on or off, and which replicas have a receiver (as last probed).
            "push": pusher is not None,
            "receivers": dict(pusher.receivers) if pusher is not None else {},
            "state": None if self.state is None else str(self.state.file.path),
            "policy": self.check.status(self.statuses.by_id()),
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
        self.spec.close()
        self.loads.close()
        await self.agents.close(UNLOAD_DRAIN_S)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.state is not None:
            await self.state.flush()


def _number(name: str) -> int:
    number = version_number(name)
    return number if number is not None else -1
