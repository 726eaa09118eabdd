"""Each replica's status, as Kubernetes keeps an object's: what it holds, and one condition per
version, written by that replica's agent alone (``agent``); everyone else reads it.

A ``ReplicaStatus`` records
- what the replica holds: each name's path (where vLLM loaded it from) and version record
  (unknown files when this proxy did not load it: ``Held.versions`` shows those as source
  ``replica``, which a wanted version under that name replaces in place); ``stored``: names whose
  bytes reached its receiver and were not unloaded since (a copy never loaded is unloaded all the
  same, so the receiver drops it). Its own listing (``observe``) is the truth: a name listed at
  the path it was loaded from keeps its record, any other is unknown, one no longer listed is
  gone;
- each held name's ``Verdict`` (``attest.verdict``);
- each name's ``Condition``: the outcome of the last load carried out for it (``carry.LoadOutcome``,
  the files it was for, and the replica's command count for the name when it ended), and how many
  commands (loads, unloads, checks) were carried out for each name: an intent compares these with
  the counts when it began (``intent``), so nothing is reported to anyone;
- the routing view (``publish``): the replica's ``adapters`` and ``digests`` maps, the ones
  routing, the response headers and ``/v1/models`` read: what it holds minus what must not be
  served (a version the probe has not passed yet, one withheld, old content under a name now
  wanted with other content).

``Statuses`` is the set of them, by replica id, and the watch on their changes: every write bumps
a generation and wakes whoever waits (``changes``): the adapter service evaluates its intents and
the window there, level-triggered, as a controller does on a watch event. Cost: O(1) per write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from proxy.adapters.attest.verdict import Verdict
from proxy.adapters.carry import LoadOutcome
from proxy.adapters.registry import Version
from proxy.fleet.replica import Replica


@dataclass(frozen=True, slots=True)
class Copy:
    version: Version  # what it was loaded from
    at: str  # the path vLLM loaded it from (a pushed copy: the replica's own store path)


@dataclass(frozen=True, slots=True)
class Condition:
    """The last load of a version carried out on one replica."""

    version: Version  # the files it was for
    outcome: LoadOutcome
    count: int  # the replica's command count for the name once it ended (``ReplicaStatus.count``)


Servable = Callable[[str, Version | None, Verdict | None], bool]


class ReplicaStatus:
    def __init__(self, replica: Replica, changed: Callable[[ReplicaStatus], None]) -> None:
        self.replica = replica  # its ``adapters`` and ``digests``: what routing may use
        self.replica_id = replica.id
        self._changed = changed
        self.paths: dict[str, str] = {}
        self._versions: dict[str, Version] = {}
        self._known: dict[str, Copy] = {}  # what a previous proxy process loaded (``remember``)
        self.stored: set[str] = set()
        self.verdicts: dict[str, Verdict] = {}
        self.conditions: dict[str, Condition] = {}
        self._counts: dict[str, int] = {}
        self.listings = 0  # listings observed (the service vouches adopted versions on each)
        self.listed: frozenset[str] = frozenset()  # the names of the last listing

    # -- reads ----------------------------------------------------------------------------

    @property
    def routable(self) -> bool:
        return self.replica.routable

    def holds(self, name: str) -> bool:
        return name in self.paths

    def version(self, name: str) -> Version | None:
        """The record ``name`` was loaded from (None: not held, or files unknown)."""
        return self._versions.get(name) if name in self.paths else None

    def versions(self) -> dict[str, Version]:
        """Each held name's version record (source ``replica`` when its files are unknown)."""
        return {n: self._versions.get(n) or Version(n, p, "replica") for n, p in self.paths.items()}

    def same(self, version: Version) -> bool:
        """The replica holds exactly ``version`` (known files, the same ones)."""
        mine = self.version(version.name)
        return mine is not None and mine.same_files(version)

    def stored_only(self) -> list[str]:
        """Names pushed into the receiver and not loaded (their copies wait to be dropped)."""
        return [name for name in self.stored if name not in self.paths]

    def count(self, name: str) -> int:
        """Commands carried out for ``name`` here so far (loads, unloads, checks)."""
        return self._counts.get(name, 0)

    def condition(self, version: Version, after: int) -> Condition | None:
        """The outcome of a load of ``version``'s files that ended after ``after`` commands."""
        found = self.conditions.get(version.name)
        if found is None or found.count <= after or not found.version.same_files(version):
            return None
        return found

    # -- writes: the agent's alone ----------------------------------------------------------

    def ended(self, name: str, load: tuple[Version, LoadOutcome] | None = None) -> None:
        """A command for ``name`` ended (a load: with the files it was for and its outcome)."""
        count = self._counts[name] = self._counts.get(name, 0) + 1
        if load is not None:
            self.conditions[name] = Condition(load[0], load[1], count)
        self._changed(self)

    def confirm(self, version: Version, at: str, *, pushed: bool) -> None:
        """The replica loaded ``version`` from ``at`` (200 from vLLM): not probed yet."""
        self.paths[version.name] = at
        self._versions[version.name] = version
        self.verdicts.pop(version.name, None)
        if pushed:
            self.stored.add(version.name)
        self._changed(self)

    def pushed(self, name: str) -> None:
        self.stored.add(name)
        self._changed(self)

    def judged(self, name: str, verdict: Verdict) -> None:
        if name in self.paths:
            self.verdicts[name] = verdict
            self._changed(self)

    def drop(self, name: str) -> None:
        """Unloaded (its receiver dropped the copies too)."""
        self._lose(name)
        self.stored.discard(name)
        self._changed(self)

    def lost(self, name: str) -> None:
        """Gone from the replica (it restarted unseen)."""
        self._lose(name)
        self._changed(self)

    def _lose(self, name: str) -> None:
        self.paths.pop(name, None)
        self._versions.pop(name, None)
        self.verdicts.pop(name, None)

    def remember(self, known: Mapping[str, Copy]) -> None:
        """Copies a previous process of this proxy loaded (``state``): a name listed at the path
        recorded is that version, not a copy of unknown files to reload in place."""
        self._known = dict(known)

    def observe(self, listed: Mapping[str, str]) -> None:
        """Align with the replica's own listing (name -> path)."""
        for name in [n for n in self.paths if n not in listed]:
            self._lose(name)
        for name, path in listed.items():
            mine, known = self._versions.get(name), self._known.get(name)
            if mine is None and known is not None and path == known.at:
                mine = known.version
            elif mine is not None and path not in (self.paths.get(name), mine.path, mine.where):
                mine = None
            if path != self.paths.get(name) or mine is None:
                self.verdicts.pop(name, None)
            self.paths[name] = path
            if mine is None:
                self._versions.pop(name, None)
            else:
                self._versions[name] = mine
        self._known = {}
        self.listings += 1
        self.listed = frozenset(listed)
        self._changed(self)

    def publish(self, servable: Servable) -> bool:
        """Set what routing may use of what is held: each name ``servable(name, its version
        record or None, its verdict or None)`` says may be served. True when that changed."""
        adapters: dict[str, str] = {}
        digests: dict[str, str] = {}
        for name, path in self.paths.items():
            version = self._versions.get(name)
            if servable(name, version, self.verdicts.get(name)):
                adapters[name] = path
                if version is not None and version.digest is not None:
                    digests[name] = version.digest
        replica = self.replica
        if adapters == replica.adapters and digests == replica.digests:
            return False
        replica.adapters.clear()
        replica.adapters.update(adapters)
        replica.digests.clear()
        replica.digests.update(digests)
        return True


class Statuses:
    """Every replica's status by id, and the watch on their changes (see the module docstring):
    ``generation`` counts every write, and the pokes of what else the watchers read."""

    def __init__(self) -> None:
        self._by_id: dict[str, ReplicaStatus] = {}
        self.generation = 0
        self._wake = asyncio.Event()

    def __iter__(self) -> Iterator[ReplicaStatus]:
        return iter(tuple(self._by_id.values()))

    def get(self, replica_id: str) -> ReplicaStatus | None:
        return self._by_id.get(replica_id)

    def by_id(self) -> dict[str, ReplicaStatus]:
        return dict(self._by_id)

    def new(self, replica: Replica) -> ReplicaStatus:
        """A fresh status for ``replica`` (it was added, or added anew)."""
        status = self._by_id[replica.id] = ReplicaStatus(replica, self._written)
        self.poke()
        return status

    def remove(self, replica_id: str) -> None:
        if self._by_id.pop(replica_id, None) is not None:
            self.poke()

    def poke(self) -> None:
        """Something the watchers read besides the statuses changed (the pool, a deadline)."""
        self.generation += 1
        self._wake.set()

    async def changes(self, seen: int) -> int:
        """Until the generation moves past ``seen``; returns the new one."""
        while self.generation == seen:
            self._wake.clear()
            await self._wake.wait()
        return self.generation

    def _written(self, status: ReplicaStatus) -> None:
        self.poke()
