"""Adapter-version registry: pure state, no I/O, no clock.

It knows
- the versions wanted on the fleet (name, path, version number, source, files fingerprint), kept
  to a window of the newest ``window`` versions (default: the replicas' smallest ``max_loras``:
  a replica runs the unloads of a plan before its loads, so the window never needs a spare slot,
  and TRL, which holds ``max_staleness + 1`` versions and loads the next before it unloads the
  oldest, needs ``max_loras >= max_staleness + 2``: a window of ``max_loras`` keeps every version
  TRL may still ask for, where one slot less would retire the oldest at the start of each load,
  while TRL's rollouts still request it); with
  several runs on the fleet, each run's versions to that run's own window (``scope_of``);
- what each replica has loaded, from which version record and from which path (a pushed copy
  lives at a path of its own on each replica).
and turns "what is" into commands for one replica: unloads first (versions dropped), then loads;
a name held with other files, or loaded before this proxy knew it, is replaced in place (vLLM's
``load_inplace``), so it never disappears from a replica that is serving it.
Invariants: a dropped or removed version is never planned again; a replica is never planned
more than ``max_loras`` adapters (unloads run before loads).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

_NUMBER = re.compile(r"-v([0-9]+)$")
DEFAULT_WINDOW = 4

Fingerprint = tuple[tuple[str, int, int], ...]  # (file name, size, mtime_ns), sorted


def version_number(name: str) -> int | None:
    match = _NUMBER.search(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Version:
    """A version: ``path`` as the client named it (what ``/v1/models`` shows); ``mount`` where
    the replicas' bucket mounts show it, when that differs (a copy a relay pushed to this proxy);
    ``files``: a directory this proxy can read its bytes from (to push them), if any."""

    name: str
    path: str
    source: Literal["bucket", "client", "replica"]
    fingerprint: Fingerprint | None = None
    mount: str | None = field(default=None, compare=False)
    files: str | None = field(default=None, compare=False)

    @property
    def number(self) -> int | None:
        return version_number(self.name)

    @property
    def where(self) -> str:
        """The path a replica loads it from without a push (through its bucket mount)."""
        return self.mount or self.path

    def same_files(self, other: Version) -> bool:
        """Same place on the bucket and, where both are known, the same files."""
        if self.where != other.where:
            return False
        if self.fingerprint is None or other.fingerprint is None:
            return True
        return self.fingerprint == other.fingerprint


@dataclass(frozen=True, slots=True)
class Load:
    version: Version
    replace: bool = False  # the name is loaded with other (or unknown) files: load in place


@dataclass(frozen=True, slots=True)
class Unload:
    name: str


Command = Load | Unload


@dataclass(slots=True)
class Registry:
    window_override: int | None = None
    max_loras: int | None = None
    versions: dict[str, Version] = field(default_factory=dict)  # wanted, in arrival order
    loaded: dict[str, dict[str, Version]] = field(default_factory=dict)  # replica -> name -> v
    at: dict[str, dict[str, str]] = field(default_factory=dict)  # replica -> name -> path used
    epoch: int = 0  # counts changes to the wanted set, so a replica sync can tell it raced one
    _arrival: int = 0
    _order: dict[str, int] = field(default_factory=dict)
    # Several runs on one fleet (``proxy.runs``): the run a name belongs to (None: the proxy's
    # own, single-run names) and that run's window. Each run's versions are kept to its own
    # window; by default every name is the proxy's own and the window is ``window``.
    scope_of: Callable[[str], str | None] = lambda name: None
    scope_window: Callable[[str], int] | None = None

    @property
    def window(self) -> int:
        if self.window_override is not None:
            return self.window_override
        if self.max_loras is not None:
            return self.max_loras
        return DEFAULT_WINDOW

    def newest(self) -> int | None:
        numbers = [v.number for v in self.versions.values() if v.number is not None]
        return max(numbers) if numbers else None

    def add(self, version: Version) -> list[str]:
        """Want ``version``; returns the names dropped to keep the window."""
        self._arrival += 1
        self.epoch += 1
        self._order[version.name] = self._arrival
        self.versions[version.name] = version
        scope, scope_of = self.scope_of(version.name), self.scope_of
        window = self.window
        if scope is not None and self.scope_window is not None:
            window = self.scope_window(scope)
        same = [v for v in self.versions.values() if scope_of(v.name) == scope]
        ranked = sorted(same, key=self._rank)
        dropped = [v.name for v in ranked[: max(len(ranked) - window, 0)]]
        for name in dropped:
            self.remove(name)
        return dropped

    def _rank(self, version: Version) -> tuple[int, int]:
        number = version.number
        return (number if number is not None else -1, self._order.get(version.name, 0))

    def remove(self, name: str) -> None:
        """No longer wanted (TRL unloaded it, its directory went away, the window moved on)."""
        if name in self.versions:
            self.epoch += 1
        self.versions.pop(name, None)
        self._order.pop(name, None)

    def wanted(self, name: str) -> Version | None:
        return self.versions.get(name)

    def holds(self, replica: str, name: str) -> bool:
        return name in self.loaded.get(replica, {})

    def mark_loaded(self, replica: str, version: Version, at: str | None = None) -> None:
        """``replica`` loaded ``version`` from ``at`` (default: its mount path)."""
        self.loaded.setdefault(replica, {})[version.name] = version
        self.at.setdefault(replica, {})[version.name] = at or version.where

    def mark_unloaded(self, replica: str, name: str) -> None:
        self.loaded.get(replica, {}).pop(name, None)
        self.at.get(replica, {}).pop(name, None)

    def forget(self, replica: str) -> None:
        self.loaded.pop(replica, None)
        self.at.pop(replica, None)

    def _ours(self, replica: str, name: str, listed: str) -> bool:
        """A listed path is the one we loaded (a pushed copy, or the version's own paths)."""
        held = self.loaded.get(replica, {}).get(name)
        if held is None:
            return False
        return listed in (self.at.get(replica, {}).get(name), held.path, held.where)

    def observe(self, replica: str, listed: dict[str, str]) -> None:
        """Align with a replica's own listing (name -> path): it is the truth of what it has.

        Names the registry loaded keep their record (listed at the path it loaded them from, or
        at the version's own path); others are recorded as ``replica``-sourced (unknown files),
        so a wanted version under that name gets reloaded.
        """
        ours = {name for name, path in listed.items() if self._ours(replica, name, path)}
        mine, where = self.loaded.get(replica, {}), self.at.get(replica, {})
        self.loaded[replica] = {
            name: mine[name] if name in ours else Version(name, path, "replica")
            for name, path in listed.items()
        }
        self.at[replica] = {
            name: where.get(name, path) if name in ours else path for name, path in listed.items()
        }

    def plan(self, replica: str, *, manage_unknown: bool) -> list[Command]:
        """Commands that bring ``replica`` to the wanted window.

        ``manage_unknown``: also unload adapters the registry never wanted (a source is
        configured, so anything else on the replica is a leftover from an earlier run).
        """
        have = self.loaded.get(replica, {})
        unloads: list[Command] = []
        loads: list[Command] = []
        for name, held in have.items():
            wanted = self.versions.get(name)
            if wanted is None:
                if manage_unknown or held.source != "replica":
                    unloads.append(Unload(name))
            elif held.source == "replica" or not held.same_files(wanted):
                loads.append(Load(wanted, replace=True))
        for name, wanted in self.versions.items():
            if name not in have:
                loads.append(Load(wanted))
        loads.sort(key=lambda c: self._rank(c.version) if isinstance(c, Load) else (0, 0))
        return unloads + loads
