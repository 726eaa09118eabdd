"""The adapter window across the proxy's own restart: a small state file, written atomically.

What it keeps: the versions wanted, in the order they arrived (name, path, source, files
fingerprint, where the bucket shows it, where this proxy read its bytes), and for each replica
the path each of those was loaded from there (a pushed copy's path is the replica's own store
path: without it a restarted proxy would reload every version in place). Written by one
background task, coalesced, after every change (``StateWriter.changed``): a temporary file, then
``os.replace`` (a reader sees the old file or the new one, whole). A crash within a write's few
milliseconds of a change loses that change only; the next start rebuilds the rest.

Whose file it is: its name and its ``key`` come from the flags that make a proxy the same proxy
(``room.state_key``: the replicas or their discovery, the adapter sources and directories, the
port), so another run's proxy on the same port never adopts it; one older than ``max_age_s`` is
not adopted either (a restart takes seconds, an HF Jobs retry minutes; an old file is another
run's). Where: ``--state-dir`` (deploy's proxy job names a directory on the mounted bucket, which
a retried job, in a fresh container, finds again), else one per port in the temp directory, like
the adapter store; a proxy on port 0 has no stable identity and keeps none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.adapters.registry import Registry, Version
from proxy.adapters.status import Copy, ReplicaStatus
from proxy.clock import TaskFailed

log = logging.getLogger("proxy.adapters")

FORMAT = 1
MAX_BYTES = 4 << 20  # a state file larger than this is not one of ours


@dataclass(frozen=True, slots=True)
class Saved:
    versions: tuple[Version, ...]  # wanted, in arrival order
    held: dict[str, dict[str, str]] = field(default_factory=dict)  # replica -> name -> path
    saved_at: float = 0.0  # seconds since the epoch


class Adopted:
    """What a previous process of this proxy left, once adopted (``adopt``): each replica's
    copies (``Held.remember``), and the versions nothing vouches for yet: their bytes cannot be
    read here, so they are not replayed (``hides``) until a replica's listing vouches for them,
    and dropped once every replica has been listed without them (``listed``)."""

    def __init__(self) -> None:
        self.copies: dict[str, dict[str, Copy]] = {}  # replica id -> name -> copy
        self.unvouched: set[str] = set()
        self._listed: set[str] = set()

    def adopt(self, saved: Saved, registry: Registry) -> None:
        registry.restore(saved.versions)
        for rid, held in saved.held.items():
            wanted = registry.wanted
            self.copies[rid] = {n: Copy(v, at) for n, at in held.items() if (v := wanted(n))}
        self.unvouched = {v.name for v in saved.versions if v.files is None}
        log.info("adapter state adopted: %s", ", ".join(v.name for v in saved.versions))

    def hides(self, name: str) -> bool:
        return name in self.unvouched

    def listed(self, replica: str, names: set[str], members: set[str]) -> list[str]:
        """``replica`` listed ``names``; the unvouched names to drop now (every member of the
        pool listed without them)."""
        if not self.unvouched:
            return []
        self.unvouched -= names
        self._listed.add(replica)
        if not self._listed >= members:
            return []
        dropped, self.unvouched = sorted(self.unvouched), set()
        return dropped


def snapshot(registry: Registry, held: dict[str, ReplicaStatus]) -> Saved:
    """What the state file keeps: the wanted versions, and where each replica loaded each."""
    paths = {
        rid: {
            name: at for name, at in h.paths.items() if (v := registry.wanted(name)) and h.same(v)
        }
        for rid, h in held.items()
    }
    return Saved(tuple(registry.versions.values()), paths, time.time())


class StateFile:
    def __init__(self, directory: Path, key: str, max_age_s: float) -> None:
        self.path = directory / f"adapters-{key[:16]}.json"
        self.key = key
        self.max_age_s = max_age_s

    def read(self) -> Saved | None:
        """The state a previous process of this proxy left, or None (logged when one is
        there but not adopted). Blocking."""
        try:
            raw = self.path.read_bytes()[:MAX_BYTES]
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("adapter state %s not read (%s): starting without it", self.path, exc)
            return None
        try:
            data = json.loads(raw)
            if data.get("format") != FORMAT or data.get("key") != self.key:
                raise ValueError("written by another proxy")
            saved = Saved(
                tuple(_version(v) for v in data["versions"]),
                {str(r): {str(n): str(p) for n, p in h.items()} for r, h in data["held"].items()},
                float(data["saved_at"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("adapter state %s not adopted (%s)", self.path, exc)
            return None
        age = time.time() - saved.saved_at
        if age > self.max_age_s:
            log.info("adapter state %s is %.0f s old (over --state-max-age): not adopted",
                     self.path, age)  # fmt: skip
            return None
        return saved

    def write(self, saved: Saved) -> None:
        """Replace the file with ``saved`` (blocking; raises OSError)."""
        data = {
            "format": FORMAT,
            "key": self.key,
            "saved_at": saved.saved_at,
            "versions": [_plain(v) for v in saved.versions],
            "held": saved.held,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)


class StateWriter:
    """Writes ``snapshot()`` after each change, one write at a time, the latest state only."""

    def __init__(self, file: StateFile, snapshot: Callable[[], Saved], failed: TaskFailed) -> None:
        self.file = file
        self._snapshot = snapshot
        self._failed = failed
        self._changed = asyncio.Event()
        self._said = ""
        self.writes = 0

    def changed(self) -> None:
        self._changed.set()

    async def run(self) -> None:
        """Write after each change for as long as the proxy runs; never dies of a write."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            await asyncio.to_thread(self.write_now)

    async def flush(self) -> None:
        """The last write, at shutdown, if anything changed since the one before."""
        if self._changed.is_set():
            self._changed.clear()
            await asyncio.to_thread(self.write_now)

    def write_now(self) -> None:
        """One write (blocking); never raises: a failure is logged once per reason."""
        try:
            self.file.write(self._snapshot())
        except OSError as exc:
            if str(exc) != self._said:
                self._said = str(exc)
                log.warning("adapter state not written to %s: %s", self.file.path, exc)
            return
        except Exception as exc:  # a bug: reported, the proxy goes on
            self._failed("adapters", exc)
            return
        self._said = ""
        self.writes += 1


def _plain(version: Version) -> dict[str, Any]:
    return {
        "name": version.name,
        "path": version.path,
        "source": version.source,
        "fingerprint": [list(f) for f in version.fingerprint or ()] or None,
        "mount": version.mount,
        "files": version.files,
    }


def _version(data: dict[str, Any]) -> Version:
    source = data["source"]
    if source not in ("bucket", "client", "replica"):
        raise ValueError(f"version source {source!r}")
    fingerprint = data.get("fingerprint")
    return Version(
        str(data["name"]),
        str(data["path"]),
        source,
        tuple((str(n), int(s), int(m)) for n, s, m in fingerprint) if fingerprint else None,
        mount=data.get("mount"),
        files=data.get("files"),
    )
