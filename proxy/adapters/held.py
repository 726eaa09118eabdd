"""What one replica holds, as its agent knows it: the observed state the registry plans against,
and what of it routing may use.

Observed: each held name's path (where vLLM loaded it from) and version record (source
``replica`` when this proxy does not know its files: a wanted version under that name is
replaced in place); ``stored``: names whose bytes reached the replica's receiver and were not
unloaded since (a copy never loaded is unloaded all the same, so the receiver drops it); and each
name's probe verdict (``verdicts``: ``ok``, ``unchecked`` when no probe could be made,
``withheld``). The replica's listing (``observe``) is the truth: a name listed at the path it was
loaded from keeps its record, any other is unknown, one no longer listed is gone.

Routed (``publish``): the replica's own ``adapters`` (name -> path) and ``digests`` maps, the
ones routing, the response headers and ``/v1/models`` read, are what it holds minus what must
not be served (a version the probe has not passed yet, one withheld, old content under a name
now wanted with other content). Written here only, by the replica's agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from proxy.adapters.registry import Version
from proxy.fleet.replica import Replica

# ok; unchecked: no probe could be made yet; unverifiable: the replica cannot answer one.
Verdict = Literal["ok", "unchecked", "unverifiable", "withheld"]


@dataclass(frozen=True, slots=True)
class Copy:
    version: Version  # what it was loaded from
    at: str  # the path vLLM loaded it from (a pushed copy: the replica's own store path)


class Held:
    def __init__(self, replica: Replica) -> None:
        self._replica = replica  # its ``adapters`` and ``digests``: what routing may use
        self.replica_id = replica.id
        self.paths: dict[str, str] = {}
        self._versions: dict[str, Version] = {}
        self._known: dict[str, Copy] = {}  # what a previous proxy process loaded (``remember``)
        self.stored: set[str] = set()
        self.verdicts: dict[str, Verdict] = {}

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

    def confirm(self, version: Version, at: str, *, pushed: bool) -> None:
        """The replica loaded ``version`` from ``at`` (200 from vLLM): not probed yet."""
        self.paths[version.name] = at
        self._versions[version.name] = version
        self.verdicts.pop(version.name, None)
        if pushed:
            self.stored.add(version.name)

    def pushed(self, name: str) -> None:
        self.stored.add(name)

    def judged(self, name: str, verdict: Verdict) -> None:
        if name in self.paths:
            self.verdicts[name] = verdict

    def drop(self, name: str) -> None:
        """Unloaded (its receiver dropped the copies too)."""
        self.lost(name)
        self.stored.discard(name)

    def lost(self, name: str) -> None:
        """Gone from the replica (it restarted unseen)."""
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
            self.lost(name)
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

    def publish(self, servable: Callable[[str, Version | None, Verdict | None], bool]) -> None:
        """Set what routing may use of what is held: each name ``servable(name, its version
        record or None, its verdict or None)`` says may be served."""
        adapters, digests = self._replica.adapters, self._replica.digests
        adapters.clear()
        digests.clear()
        for name, path in self.paths.items():
            version = self._versions.get(name)
            if servable(name, version, self.verdicts.get(name)):
                adapters[name] = path
                if version is not None and version.digest is not None:
                    digests[name] = version.digest
