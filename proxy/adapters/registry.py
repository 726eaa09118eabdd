"""The adapter versions wanted on the fleet: pure desired state, no I/O, no clock.

It knows
- the versions wanted (name, path, version number, source, files fingerprint), kept to a window
  of the newest ``window`` versions (default: the replicas' smallest ``max_loras``: a replica
  runs a plan's unloads before its loads, so the window never needs a spare slot, and TRL, which
  holds ``max_staleness + 1`` versions and loads the next before it unloads the oldest, needs
  ``max_loras >= max_staleness + 2``: a window of ``max_loras`` keeps every version TRL may still
  ask for); with several runs on the fleet (the runs table, ``proxy.runs``), each run's versions
  to that run's own window, its weighted share of ``max_loras``;
- the names dropped lately (the window moved on, the source lost the directory, TRL unloaded
  it), at most ``DROPPED_REMEMBERED``: TRL's unload of one is answered 200, and a replica still
  holding one is told to unload it even when the proxy never knew its files;
and turns "what one replica holds" (``status.ReplicaStatus``) into commands for it (``plan``):
unloads first (names no longer wanted), then loads in version order; a name held with other
files, or loaded before this proxy knew it, is replaced in place (vLLM's ``load_inplace``), so
it never disappears from a replica that is serving it.
Invariants: a dropped version is never planned again until it is added again; a replica is
never planned more than the window of adapters this proxy manages (unloads run before loads).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from adapter_receiver.reference import Reference
from proxy.runs.run import Run
from proxy.runs.table import Runs

_NUMBER = re.compile(r"-v([0-9]+)$")
DEFAULT_WINDOW = 4
DROPPED_REMEMBERED = 256

Fingerprint = tuple[tuple[str, int, int], ...]  # (file name, size, mtime_ns), sorted


def version_number(name: str) -> int | None:
    match = _NUMBER.search(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Version:
    """A version: ``path`` as the client named it (what ``/v1/models`` shows); ``mount`` where
    the replicas' bucket mounts show it, when that differs (a copy a relay pushed to this proxy);
    ``files``: a directory this proxy can read its bytes from (to push them), if any; ``digest``:
    its identity, the content digest of its files (``adapter_receiver.wire.content_digest``: the
    push and the receivers check the same), when the proxy has read them; ``reference``: the
    served-policy probe the trainer computed for it (``probe``), when it carries one."""

    name: str
    path: str
    source: Literal["bucket", "client", "replica"]
    fingerprint: Fingerprint | None = None
    mount: str | None = field(default=None, compare=False)
    files: str | None = field(default=None, compare=False)
    digest: str | None = field(default=None, compare=False)
    reference: Reference | None = field(default=None, compare=False)

    @property
    def number(self) -> int | None:
        return version_number(self.name)

    @property
    def where(self) -> str:
        """The path a replica loads it from without a push (through its bucket mount)."""
        return self.mount or self.path

    def same_files(self, other: Version) -> bool:
        """Same place on the bucket and, where both are known, the same content (digests, else
        the files' sizes and times)."""
        if self.where != other.where:
            return False
        if self.digest is not None and other.digest is not None:
            return self.digest == other.digest
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


class Holding(Protocol):
    """What one replica holds, as ``plan`` reads it (``status.ReplicaStatus``)."""

    def holds(self, name: str) -> bool: ...

    def versions(self) -> Mapping[str, Version]: ...

    def stored_only(self) -> list[str]: ...


class Retired:
    """Names that were wanted and are not any more, the newest ``limit`` of them: a bounded set,
    the oldest forgotten first. The registry writes it; the data plane asks ``name in retired``
    of every answer (one dict lookup)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._names: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def add(self, name: str) -> None:
        self._names[name] = None
        self._names.move_to_end(name)
        while len(self._names) > self._limit:
            self._names.popitem(last=False)

    def discard(self, name: str) -> None:
        self._names.pop(name, None)


class Registry:
    """The wanted versions; written by the adapter service only (``service``)."""

    def __init__(self, runs: Runs, window_override: int | None = None) -> None:
        self._runs = runs
        self.window_override = window_override
        self.max_loras: int | None = None  # the fleet's smallest, as the service last read it
        self.versions: dict[str, Version] = {}  # wanted, in arrival order
        self._order: dict[str, int] = {}
        self._arrival = 0
        self.retired = Retired(DROPPED_REMEMBERED)  # dropped lately (``dropped``)

    @property
    def window(self) -> int:
        if self.window_override is not None:
            return self.window_override
        if self.max_loras is not None:
            return self.max_loras
        return DEFAULT_WINDOW

    def run_of(self, name: str) -> Run:
        """The run a replica-side name belongs to (the default run's, but a declared run's)."""
        return self._runs.of_adapter(name)

    def window_of(self, run: Run) -> int:
        """How many versions ``run`` may keep: its share of ``window``."""
        return run.share(self.window)

    def newest(self) -> int | None:
        numbers = [v.number for v in self.versions.values() if v.number is not None]
        return max(numbers) if numbers else None

    def wanted(self, name: str) -> Version | None:
        return self.versions.get(name)

    def dropped(self, name: str) -> bool:
        """``name`` was wanted and is not any more (kept for ``DROPPED_REMEMBERED`` names)."""
        return name in self.retired

    def add(self, version: Version, *, pinned: Container[str] = ()) -> list[str]:
        """Want ``version``; returns the names dropped to keep its scope's window (never one of
        ``pinned``: a version whose load is under way stays until it ends, then ``trim``)."""
        self._arrival += 1
        self._order[version.name] = self._arrival
        self.versions[version.name] = version
        self.retired.discard(version.name)
        return self.trim(version.name, pinned=pinned)

    def trim(self, name: str, *, pinned: Container[str] = ()) -> list[str]:
        """Drop the oldest versions of ``name``'s scope beyond its window; a ``pinned`` one is
        kept over the window until it is trimmed again, unpinned."""
        run = self.run_of(name)
        same = sorted(
            (v for v in self.versions.values() if self.run_of(v.name) is run), key=self._rank
        )
        oldest = same[: max(len(same) - self.window_of(run), 0)]
        dropped = [v.name for v in oldest if v.name not in pinned]
        for old in dropped:
            self.remove(old)
        return dropped

    def restore(self, versions: Iterable[Version]) -> None:
        """Want ``versions`` as a previous process of this proxy did (its window then)."""
        for version in versions:
            self._arrival += 1
            self._order[version.name] = self._arrival
            self.versions[version.name] = version

    def remove(self, name: str) -> bool:
        """No longer wanted (TRL unloaded it, its directory went away, the window moved on).
        True when it was wanted."""
        self.retired.add(name)
        self._order.pop(name, None)
        return self.versions.pop(name, None) is not None

    def _rank(self, version: Version) -> tuple[int, int]:
        number = version.number
        return (number if number is not None else -1, self._order.get(version.name, 0))

    def plan(self, held: Holding, *, manage_unknown: bool, loads: bool = True) -> list[Command]:
        """Commands that bring a replica holding ``held`` to the wanted versions.

        ``manage_unknown``: also unload adapters this proxy never knew (a source is configured,
        so anything else on the replica is a leftover from an earlier run). ``loads``: False
        plans the unloads only (shutting down)."""
        unloads: list[Command] = []
        replaces: list[Load] = []
        for name, have in held.versions().items():
            wanted = self.versions.get(name)
            if wanted is None:
                ours = have.source != "replica" or name in self.retired
                if manage_unknown or ours:
                    unloads.append(Unload(name))
            elif have.source == "replica" or not have.same_files(wanted):
                replaces.append(Load(wanted, replace=True))
        for name in held.stored_only():
            if name not in self.versions:
                unloads.append(Unload(name))  # a pushed copy never loaded: its receiver drops it
        if not loads:
            return unloads
        new = [Load(v) for name, v in self.versions.items() if not held.holds(name)]
        ordered = sorted([*replaces, *new], key=lambda c: self._rank(c.version))
        return [*unloads, *ordered]
