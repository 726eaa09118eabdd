"""The adapter service: the registry, its sources and the broadcaster, behind TRL's calls.

- ``load`` / ``unload``: TRL's calls, carried out for the whole fleet (see ``broadcast``); they
  return outcomes (``LoadResult``, ``UnloadResult``) that the HTTP edge turns into answers, and
  raise ``BadAdapterRequest`` (400) or ``NoReplica`` (503). A load answers once every routable
  replica has the version (all or nothing). An unload is answered at once and carried out in
  the background (TRL ignores its answer, but its round trip counts in ``perf/weight_sync_s``):
  a load that arrives later waits, on each replica, for the unloads answered before it there
  (``unloads``), so a replica never holds the next version beside one already unloaded (vLLM's
  ``max_loras`` counts both, and evicts a live one silently when full); the loads and unloads
  of one name keep their arrival order (``turns``).
- ``source_changed``: a watcher found new or changed versions (pre-loaded on every replica
  before anyone asks) or versions whose directory went away (dropped, never replayed).
- ``admit``: a replica that joins or comes back is given the window before it takes traffic.
- ``out_of_step``: a replica answered "model does not exist" for a version it was believed to
  hold (it restarted between probes): forget it there and reconcile it in the background.

Where a version's bytes come from, to push them (``broadcast``): the proxy's own receiver store
when the path is one of its entries (a relay pushed it here; the replicas' mount shows it at
the upload's origin), else the path itself when the proxy can read it (beside the trainer, or
through its own mount). A version the proxy cannot read loads from the mount only. A name no
longer wanted anywhere is dropped from the proxy's store. With a ``Mirror``, a path in its local
directory (TRL's, on the trainer's disk) is snapshotted for the bucket at once and mounts at
its bucket copy (``Version.mount``): pushed from the local path, loaded from the bucket's.
No aiohttp here: this is a service, not the edge.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapter_receiver.store import Entry, Store
from adapter_receiver.wire import shown
from proxy.adapters.broadcast import Broadcaster, Outcome
from proxy.adapters.calls import LoadResult, UnloadResult, parse_adapter_request
from proxy.adapters.mirror import Mirror
from proxy.adapters.push import Pusher
from proxy.adapters.registry import Fingerprint, Registry, Version, version_number
from proxy.adapters.sources import fingerprint
from proxy.adapters.turns import Turn, Turns
from proxy.adapters.unloads import PendingUnload, Unloads
from proxy.clock import Failed
from proxy.fleet.info import FleetInfo
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics
from proxy.upstream.errors import CONTROL_ERRORS

log = logging.getLogger("proxy.adapters")

_RETIRED_REMEMBERED = 256  # names of versions the proxy retired itself, kept for TRL's unloads
# On shutdown the unloads already answered get this long to reach the replicas (each call is
# bounded by broadcast.UNLOAD_TIMEOUT_S); what is left is cancelled.
UNLOAD_DRAIN_S = 10.0


class AdapterService:
    def __init__(
        self,
        broadcaster: Broadcaster,
        registry: Registry,
        pool: ReplicaPool,
        info: FleetInfo,
        metrics: Metrics,
        *,
        pusher: Pusher | None,
        deadline_s: float,
        has_source: bool,
        failed: Failed,
        store: Store | None = None,
        fetch: Callable[[str, str], Entry | None] | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        self.broadcaster = broadcaster
        self.registry = registry  # the broadcaster's too: it carries out the registry's plans
        self._pool = pool
        self._pusher = pusher  # None: pushing is off
        self._deadline_s = deadline_s  # how long a load waits for lagging mounts
        self.store = store  # the proxy's own receiver store
        # fetch(name, mount path): download a version this proxy cannot read into ``store``
        # (the Hub bucket source); None when that path is not one of the source's.
        self._fetch = fetch
        self.mirror = mirror  # copies what TRL saves on the trainer's disk into the bucket
        self.metrics = metrics
        self._info = info  # re-reads a replica's models (reconciling one that lost an adapter)
        self._failed = failed  # reports an exception a background task of ours survived
        self.has_source = has_source
        self._pending: dict[str, tuple[Version, asyncio.Task[list[Outcome]]]] = {}
        self._reconciling: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._unloading: set[asyncio.Task[None]] = set()  # answered, being carried out
        self._unloads = Unloads(self.broadcaster.unload_on)
        self.broadcaster.before_load = self._unloads.cleared
        self._turns = Turns()  # one load or unload of a name at a time, in arrival order
        # Versions the proxy retired itself (window moved on, directory gone): TRL's later
        # unload of one is answered 200, as if it had done it.
        self._retired: deque[str] = deque(maxlen=_RETIRED_REMEMBERED)
        self.source_seen = False  # the source's first scan has been applied

    # -- what routing and the fleet ask ---------------------------------------------------

    def knows(self, name: str) -> bool:
        return name in self.registry.versions or name in self._pending

    @property
    def epoch(self) -> int:
        return self.registry.epoch

    @property
    def versions(self) -> dict[str, Version]:
        """The versions wanted on the fleet, by name."""
        return self.registry.versions

    @property
    def pushing(self) -> bool:
        """Adapters reach the replicas by push (else through their bucket mounts)."""
        return self._pusher is not None

    def limit(self, max_loras: int | None) -> None:
        """The fleet's smallest ``max_loras`` (sets the default window)."""
        self.registry.max_loras = max_loras

    # -- TRL's calls ---------------------------------------------------------------------

    async def load(self, body: bytes) -> LoadResult:
        name, path = parse_adapter_request(body, need_path=True)
        self._pool.require_routable()
        version = await self._resolve(name, path)
        started = time.perf_counter()
        outcomes = await asyncio.shield(self._start_load(version))
        seconds = time.perf_counter() - started
        took = sum(1 for o in outcomes if o.status == "ok")
        if took and not any(o.status in ("failed", "lagging") for o in outcomes):
            log.info("adapter %s loaded on %d replica(s) in %.2f s", shown(name), took, seconds)
        return LoadResult(version, outcomes, seconds, self._deadline_s)

    async def _resolve(self, name: str, path: str) -> Version:
        """The version a client's load names, with where its bytes can be read (if anywhere)."""
        entry = await asyncio.to_thread(self.store.lookup, path) if self.store else None
        if entry is not None:
            return Version(name, path, "client", mount=entry.origin, files=str(entry.path))
        mount = await self._mirrored(name, path)
        files = await asyncio.to_thread(fingerprint, Path(path))
        readable = path if files is not None else None
        return Version(name, path, "client", files, mount=mount, files=readable)

    async def _mirrored(self, name: str, path: str) -> str | None:
        """The bucket path of a version the mirror copies there (seen now), else None."""
        mirror = self.mirror
        if mirror is None or mirror.covers(path) != name:
            return None
        await mirror.saw(name)
        return mirror.target(name)

    async def _fetched(self, version: Version) -> Version:
        """A version to push that this proxy cannot read: its copy, downloaded once."""
        if version.files is not None or self._fetch is None or self.store is None:
            return version
        if self._pusher is None:
            return version
        entry = await asyncio.to_thread(self.store.by_origin, version.where)
        if entry is None:
            try:
                entry = await asyncio.to_thread(self._fetch, version.name, version.where)
            except Exception as exc:  # the Hub failed: the replicas load from their mounts
                why = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "adapter %s not downloaded (%s): loading from the mount",
                    shown(version.name),
                    why,
                )
                return version
        return version if entry is None else replace(version, files=str(entry.path))

    def _start_load(self, version: Version) -> asyncio.Task[list[Outcome]]:
        pending = self._pending.get(version.name)
        if pending is not None and pending[0].same_files(version):
            return pending[1]
        turn, before = self._turns.take(version.name), self._unloads.seq
        self._unloads.overtaken(version.name)
        task = asyncio.create_task(self._load(version, turn, before), name=f"load {version.name}")
        task.add_done_callback(lambda _: turn.abandon())
        self._pending[version.name] = (version, task)
        task.add_done_callback(lambda _: self._done(version.name, task))
        return task

    def _done(self, name: str, task: asyncio.Task[list[Outcome]]) -> None:
        if self._pending.get(name, (None, None))[1] is task:
            del self._pending[name]

    async def _load(self, version: Version, turn: Turn, before: int) -> list[Outcome]:
        async with turn:  # its place among this name's loads and unloads, taken at arrival
            return await self._load_now(version, before)

    async def _load_now(self, version: Version, before: int) -> list[Outcome]:
        wanted = self.registry.wanted(version.name)
        if wanted is not None and wanted.same_files(version):
            version = replace(wanted, files=wanted.files or version.files)  # the watcher's record
        version = await self._fetched(version)
        previous = self.registry.wanted(version.name)  # an in-place replace rolls back to it
        for name in self.registry.add(version):
            self._retired.append(name)
            self._unload_later(name, retired=True)
        started = time.perf_counter()
        outcomes = await self.broadcaster.load_fleet(version, before)
        seconds = time.perf_counter() - started
        ok = all(o.status in ("ok", "unreachable") for o in outcomes)
        if not ok:  # refused or never visible: rolled back to what was served, or to nothing
            if previous is not None and not previous.same_files(version):
                for name in self.registry.add(previous):
                    self._retired.append(name)
                    self._unload_later(name, retired=True)
            else:
                self.registry.remove(version.name)
        # With no replica reachable yet the version stays wanted: replicas get it on admission.
        self.metrics.record_fleet_load(seconds, "ok" if ok else "failed")
        paths = {o.via for o in outcomes if o.attempts and o.status == "ok"}
        if ok and paths:
            self.metrics.push.record_sync(paths.pop() if len(paths) == 1 else "mixed", seconds)
        for outcome in outcomes:
            if outcome.attempts:
                self.metrics.record_adapter_load(
                    outcome.replica.id, outcome.status, outcome.attempts, outcome.seconds
                )
        return outcomes

    async def unload(self, body: bytes) -> UnloadResult:
        """TRL's unload: answered at once, carried out in the background (in its turn among
        this name's loads and unloads, and on each replica before any later load there)."""
        name, _ = parse_adapter_request(body, need_path=False)
        known = (
            name in self.registry.versions
            or name in self._pending
            or name in self._retired
            or any(name in r.adapters for r in self._pool)
        )
        if known and not self._unloads.waiting(name):  # nothing held: vLLM's own 404; a repeat
            self._unload_later(name, retired=False)  # of a waiting unload: merged into it
        return UnloadResult(name, known)

    async def settled(self) -> None:
        """Until every unload answered so far has been carried out."""
        while self._unloading:
            await asyncio.wait(list(self._unloading))

    def _unload_later(self, name: str, *, retired: bool) -> None:
        """Unload ``name`` everywhere in the background. ``retired``: the window moved on (or
        the source lost it): skipped if a later load wanted it again."""
        turn, pending = self._turns.take(name), self._unloads.queue(name, mergeable=not retired)
        task = asyncio.create_task(self._unload(name, turn, pending, retired))
        self._unloading.add(task)
        task.add_done_callback(self._unloading.discard)
        task.add_done_callback(lambda _: turn.abandon())
        task.add_done_callback(lambda _: self._unloads.abandon(pending))
        task.add_done_callback(self._report)

    async def _unload(self, name: str, turn: Turn, pending: PendingUnload, retired: bool) -> None:
        async with turn:
            self._unloads.started(pending)
            if retired and name in self.registry.versions:
                return
            self.registry.remove(name)
            await self._unloads.run(pending, self.broadcaster.unload_targets(name))
            await self._drop_stored(name)

    async def _drop_stored(self, name: str) -> None:
        if self.store is not None:
            await asyncio.to_thread(self.store.drop, name)

    # -- sources -------------------------------------------------------------------------

    async def source_changed(
        self, added: dict[str, tuple[str, Fingerprint]], removed: list[str]
    ) -> None:
        for name in removed:
            if name in self.registry.versions:
                log.info("adapter %s disappeared from the source: dropping it", shown(name))
                self.registry.remove(name)
                self._retired.append(name)
                self._unload_later(name, retired=True)
        for name, (path, files) in sorted(added.items(), key=lambda kv: _number(kv[0])):
            readable = await asyncio.to_thread(os.path.isdir, path)  # on this proxy's mount
            mount = await self._mirrored(name, path)
            version = Version(
                name, path, "bucket", files, mount=mount, files=path if readable else None
            )
            wanted = self.registry.wanted(name)
            if wanted is not None and wanted.same_files(version):
                continue
            log.info("adapter %s found in the source: pre-loading it on every replica", shown(name))
            self._start_load(version)
        if not self.source_seen:
            # Now the source is known, leftovers on the replicas can be told apart: clean them.
            self.source_seen = True
            for replica in self._pool.routable():
                self._spawn(self.admit(replica))

    # -- replicas ------------------------------------------------------------------------

    async def admit(self, replica: Replica) -> bool:
        pusher = self._pusher
        if pusher is not None:  # it may have joined anew, with or without a receiver
            pusher.forget(replica.id)
            await pusher.probe(replica)
        self.registry.observe(replica.id, dict(replica.adapters))
        manage = self.has_source and self.source_seen
        ok = await self.broadcaster.bring_in_step(replica, manage_unknown=manage)
        if ok:
            self.metrics.record_reconcile()
        return ok

    def out_of_step(self, replica: Replica, name: str) -> None:
        log.warning(
            "replica %s lost adapter %s (restarted?): reconciling it", replica.id, shown(name)
        )
        self.broadcaster.dropped(replica, name)
        if replica.id not in self._reconciling:
            task = asyncio.create_task(self._reconcile(replica))
            self._reconciling[replica.id] = task
            task.add_done_callback(lambda _: self._reconciling.pop(replica.id, None))
            task.add_done_callback(self._report)

    async def _reconcile(self, replica: Replica) -> None:
        try:
            await self._info.refresh(replica)
            self.limit(self._info.smallest_max_loras())
        except CONTROL_ERRORS as exc:  # the health loop takes over if it is really gone
            log.warning("replica %s: reconcile failed: %s", replica.id, exc)
            return
        if await self.admit(replica):
            log.info("replica %s reconciled", replica.id)

    def roots(self) -> dict[str, str]:
        """Each wanted version's path as its client named it (``/v1/models`` shows these)."""
        return {name: version.path for name, version in self.registry.versions.items()}

    def stats(self) -> dict[str, int]:
        return {
            "wanted": len(self.registry.versions),
            "loading": len(self._pending),
            "newest": self.registry.newest() or 0,
            "mirroring": self.mirror.backlog if self.mirror is not None else 0,
        }

    def status(self) -> dict[str, Any]:
        pusher = self._pusher
        return {
            "window": self.registry.window,
            "wanted": sorted(self.registry.versions, key=_number),
            "loading": sorted(self._pending),
            "unloading": len(self._unloading),
            "unloads_owed": self._unloads.owed(),
            "newest": self.registry.newest(),
            # Pushing on or off, and which replicas have a receiver (as last probed).
            "push": pusher is not None,
            "receivers": dict(pusher.receivers) if pusher is not None else {},
        }

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(self._report)

    def _report(self, task: asyncio.Task[Any]) -> None:
        """A background task of ours ended with an exception: report it (it is not re-raised,
        so it cannot take anything else down)."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._failed("adapters", exc)

    async def close(self) -> None:
        loads = [*self._reconciling.values(), *(task for _, task in self._pending.values())]
        for task in loads:  # no load starts on a replica during the shutdown
            task.cancel()
        await asyncio.gather(*loads, return_exceptions=True)
        if self._unloading:  # answered to TRL already: carry them out if the replicas answer
            await asyncio.wait(list(self._unloading), timeout=UNLOAD_DRAIN_S)
        tasks = [
            *self._background,
            *self._unloading,
            *self._reconciling.values(),
            *(task for _, task in self._pending.values()),
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _number(name: str) -> int:
    number = version_number(name)
    return number if number is not None else -1
