"""What one replica holds, as its agent knows it: the observed state the registry plans against.

``paths`` (name -> the path vLLM loaded it from) is the replica's own ``adapters`` map, the one
routing and ``/v1/models`` read: kept once, written here only, by the replica's agent. Beside it,
each held name's version record (source ``replica`` when this proxy does not know its files: a
wanted version under that name is replaced in place), and ``stored``: names whose bytes reached
the replica's receiver and were not unloaded since (a copy never loaded is unloaded all the same,
so the receiver drops it). The replica's listing (``observe``) is the truth: a name listed at the
path it was loaded from keeps its record, any other is unknown, one no longer listed is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.adapters.registry import Version


@dataclass(frozen=True, slots=True)
class Copy:
    version: Version  # what it was loaded from
    at: str  # the path vLLM loaded it from (a pushed copy: the replica's own store path)


class Held:
    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths  # the replica's ``adapters``: routing reads it
        self._versions: dict[str, Version] = {}
        self._known: dict[str, Copy] = {}  # what a previous proxy process loaded (``remember``)
        self.stored: set[str] = set()

    def holds(self, name: str) -> bool:
        return name in self.paths

    def versions(self) -> dict[str, Version]:
        """Each held name's version record (source ``replica`` when its files are unknown)."""
        return {n: self._versions.get(n) or Version(n, p, "replica") for n, p in self.paths.items()}

    def same(self, version: Version) -> bool:
        """The replica holds exactly ``version`` (known files, the same ones)."""
        mine = self._versions.get(version.name)
        return mine is not None and version.name in self.paths and mine.same_files(version)

    def stored_only(self) -> list[str]:
        """Names pushed into the receiver and not loaded (their copies wait to be dropped)."""
        return [name for name in self.stored if name not in self.paths]

    def confirm(self, version: Version, at: str, *, pushed: bool) -> None:
        """The replica loaded ``version`` from ``at`` (200 from vLLM)."""
        self.paths[version.name] = at
        self._versions[version.name] = version
        if pushed:
            self.stored.add(version.name)

    def pushed(self, name: str) -> None:
        self.stored.add(name)

    def drop(self, name: str) -> None:
        """Unloaded (its receiver dropped the copies too)."""
        self.lost(name)
        self.stored.discard(name)

    def lost(self, name: str) -> None:
        """Gone from the replica (it restarted unseen)."""
        self.paths.pop(name, None)
        self._versions.pop(name, None)

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
            self.paths[name] = path
            if mine is None:
                self._versions.pop(name, None)
            else:
                self._versions[name] = mine
        self._known = {}
