"""Mirroring the adapter versions TRL saves on the trainer's disk into the bucket, behind the sync.

With ``--adapters-local L --adapters-mirror M`` TRL saves each ``trl-policy-vN`` into ``L`` (the
trainer machine's own disk), the proxy pushes it to the replicas from there, and this mirror
copies it into ``M`` (``<output_dir>/.vllm_lora`` on the bucket mount) in the background: the
bucket keeps its durable copy and replicas without a receiver load ``M/<name>`` once it has
landed there (``mounted``, which the broadcaster awaits before such a load). Nothing TRL waits
for waits on the bucket mount, unless a replica has no receiver.

The algorithm, in the order things happen to one version:

1. ``saw(name)``: the first sighting (TRL's load naming ``L/<name>``, the watcher, or this
   mirror's own scan of ``L`` every ``interval_s``) snapshots it at once: each file hard-linked
   (copied where a link fails) into ``L/.mirror/<seq>-<name>/``. The snapshot holds the files'
   inodes, so TRL deleting or replacing ``L/<name>`` later cannot lose the bytes. Cost: one
   ``link`` per file (under a millisecond for an adapter's three files). A version whose files
   changed since its last snapshot (a resumed run republishing a name) is snapshotted again.
2. One worker carries out the jobs in the order the versions were first seen: the snapshot is
   copied to ``M/.<name>.tmp`` and renamed to ``M/<name>`` (complete or not at all; a copy
   already there with the same bytes is kept as it is), then the snapshot is dropped. A failed
   copy is retried up to ``MAX_ATTEMPTS`` times in all, waiting as ``RETRY`` says (0.5 s
   doubling to 8 s); then it is given up (logged, counted) and its waiters are told.
3. A version gone from ``L`` (TRL deletes the one that left its window) is pruned from ``M``
   after its copy, by a job in the same order, and only if this mirror made that copy (or found
   the same bytes there): the bucket copies of other runs and of TRL itself are never touched.

``MAX_BACKLOG``: more versions waiting to land than this is logged and counted (``backlog``)
but never dropped: every version TRL publishes lands, in order, before it is pruned.
Dot-names in ``L`` (``.mirror``, TRL's staging ``.<name>.tmp``) are never versions.

Every step survives its own exceptions: a failed copy is retried and counted, anything else
(a bug) is reported through ``failed("mirror", exc)`` and the worker goes on with the next job.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import itertools
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from adapter_receiver.wire import safe_name, shown
from proxy.adapters.registry import Fingerprint, Version, version_number
from proxy.adapters.sources import fingerprint
from proxy.clock import Backoff, Clock, TaskFailed, run_every

log = logging.getLogger("proxy.adapters")

SNAPSHOTS = ".mirror"  # under the local directory (a dot-name: never a version)
MAX_BACKLOG = 8  # versions waiting to land past which each new one is logged and counted
MAX_ATTEMPTS = 5  # copies of one version to the mirror before it is given up
RETRY = Backoff(first_s=0.5, max_s=8.0)  # between copies of one version
DRAIN_S = 20.0  # at exit, how long the worker may go on landing what is left

FailureCause = Literal["snapshot", "copy", "gave_up", "backlog", "prune", "listing"]
FAILURE_CAUSES: tuple[FailureCause, ...] = (
    "snapshot",
    "copy",
    "gave_up",
    "backlog",
    "prune",
    "listing",
)
CopyFile = Callable[[str, str], object]  # shutil.copy2's shape: (source, destination)


@dataclass(frozen=True, slots=True)
class MirrorEvents:
    """What the mirror tells the metrics: seconds from first seen to landed, and failures."""

    landed: Callable[[float], None] = lambda seconds: None
    failure: Callable[[FailureCause], None] = lambda cause: None


@dataclass(eq=False, slots=True)
class _Copy:
    name: str
    snapshot: Path
    files: Fingerprint  # of the local version when it was snapshotted
    seen: float  # perf_counter at the first sighting
    done: asyncio.Event = field(default_factory=asyncio.Event)
    ok: bool = False  # landed (else given up), once ``done``


@dataclass(frozen=True, slots=True)
class _Prune:
    name: str


class Mirror:
    """The local directory's versions, copied in order into the mirror directory (module doc)."""

    def __init__(
        self,
        local: Path,
        mirror: Path,
        clock: Clock,
        failed: TaskFailed,
        *,
        interval_s: float,
        events: MirrorEvents | None = None,
        copy_file: CopyFile = shutil.copy2,
    ) -> None:
        self.local = Path(os.path.abspath(local))
        self.mirror = Path(os.path.abspath(mirror))
        self.interval_s = interval_s
        self._clock = clock
        self._failed = failed
        self._events = events or MirrorEvents()
        self.copy_file = copy_file  # how one file is copied to the mirror (tests hold it)
        self._jobs: deque[_Copy | _Prune] = deque()
        self._wake = asyncio.Event()
        self._empty = asyncio.Event()  # no job left (what the drain at exit waits for)
        self._empty.set()
        self._latest: dict[str, _Copy] = {}  # the newest snapshot of each name seen in L
        self._present: set[str] = set()  # names in L at the last look
        self._unlisted = ""  # why L could not be listed at the last look ("": it could)
        self.made: set[str] = set()  # names in M whose copy is this mirror's (pruned with L's)
        self._seq = itertools.count(1)
        self._lock = asyncio.Lock()  # one sighting at a time (TRL's load and the scan race)

    # -- what the proxy asks -------------------------------------------------------------

    def covers(self, path: str) -> str | None:
        """The version name when ``path`` is a version directory in the local directory."""
        where = Path(os.path.abspath(path))
        name = where.name
        return name if where.parent == self.local and safe_name(name) else None

    def target(self, name: str) -> str:
        """Where the bucket mount shows version ``name`` once it has landed."""
        return str(self.mirror / name)

    @property
    def backlog(self) -> int:
        """Versions seen and not landed yet (the ``mirroring`` gauge)."""
        return sum(1 for job in self._jobs if isinstance(job, _Copy) and not job.done.is_set())

    async def mounted(self, version: Version, deadline: float) -> bool:
        """Until a version this mirror lands has landed (True), or was given up or ``deadline``
        (the clock's) passed first (False). Any other version: True at once."""
        copy = self._latest.get(version.name)
        if copy is None or version.where != self.target(version.name):
            return True
        if not copy.done.is_set() and (left := deadline - self._clock.monotonic()) > 0:
            await _first(copy.done.wait(), self._clock.sleep(left))
        return copy.done.is_set() and copy.ok

    # -- sightings -----------------------------------------------------------------------

    async def saw(self, name: str) -> None:
        """Version ``name`` is in the local directory: snapshot it and queue its copy, unless
        these files are snapshotted already. Never raises: a failure is logged and counted."""
        if not safe_name(name):
            return
        async with self._lock:
            latest = self._latest.get(name)
            token = f"{next(self._seq):06d}-{name}"
            try:
                files = await asyncio.to_thread(self._snapshot, name, token, latest)
            except OSError as exc:
                self._events.failure("snapshot")
                log.warning("adapter %s not snapshotted for the mirror: %s", shown(name), exc)
                return
            if files is None:  # not complete, or the same files as the last snapshot
                return
            self._present.add(name)
            copy = _Copy(name, self.local / SNAPSHOTS / token, files, time.perf_counter())
            self._latest[name] = copy
            self._queue(copy)
            if (waiting := self.backlog) > MAX_BACKLOG:
                self._events.failure("backlog")
                log.warning("adapter mirror: %d versions waiting to land (more than %d); none "
                            "is dropped", waiting, MAX_BACKLOG)  # fmt: skip

    def _snapshot(self, name: str, token: str, latest: _Copy | None) -> Fingerprint | None:
        source = self.local / name
        files = fingerprint(source)
        if files is None or (latest is not None and latest.files == files):
            return None
        dest = self.local / SNAPSHOTS / token
        dest.mkdir(parents=True)
        try:
            for entry in os.scandir(source):
                if entry.is_file(follow_symlinks=False):
                    try:
                        os.link(entry.path, dest / entry.name)
                    except OSError:  # no hard links on this filesystem: a copy will do
                        shutil.copy2(entry.path, dest / entry.name)
            if fingerprint(dest) != files:
                raise OSError(f"{source} changed while it was snapshotted")
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        return files

    async def scan(self) -> None:
        """One look at the local directory: new or changed versions are seen, versions gone
        from it are pruned from the mirror (after their copies). Only a name seen before the
        listing can be gone from it: one first seen while it ran (TRL's load naming it, between
        TRL's rename and this listing) is not in it, yet on disk."""
        known = set(self._present)
        found = await asyncio.to_thread(self._versions)
        if found is None:
            return  # the listing failed: nothing is gone, it is looked at again next time
        for name in sorted(found, key=_number):
            await self.saw(name)
        for name in sorted((known & self._present) - found, key=_number):
            self._present.discard(name)
            self._latest.pop(name, None)
            self._queue(_Prune(name))

    def _versions(self) -> set[str] | None:
        """The version names in the local directory; None when it cannot be listed now (an
        unreadable directory is not an empty one: every mirrored copy would be pruned), said once
        per distinct failure. A directory that is not there holds none."""
        try:
            entries = list(os.scandir(self.local))
        except (FileNotFoundError, NotADirectoryError):
            return set()
        except OSError as exc:
            if str(exc) != self._unlisted:
                self._events.failure("listing")
                log.warning("adapter mirror: %s cannot be listed (%s): nothing is pruned until "
                            "it can", self.local, exc)  # fmt: skip
            self._unlisted = str(exc)
            return None
        self._unlisted = ""
        return {e.name for e in entries if e.is_dir(follow_symlinks=False) and safe_name(e.name)}

    # -- the worker ----------------------------------------------------------------------

    def _queue(self, job: _Copy | _Prune) -> None:
        self._jobs.append(job)
        self._empty.clear()
        self._wake.set()

    async def work(self) -> None:
        """Carry out the jobs in order, forever; survives every job's exception."""
        while True:
            while not self._jobs:
                self._wake.clear()
                await self._wake.wait()
            job = self._jobs[0]
            try:
                await (self._land(job) if isinstance(job, _Copy) else self._prune(job.name))
            except Exception as exc:  # a bug: reported, and the next job goes on
                self._failed("mirror", exc)
                if isinstance(job, _Copy):
                    job.done.set()
            self._jobs.popleft()
            if not self._jobs:
                self._empty.set()

    async def _land(self, copy: _Copy) -> None:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                await asyncio.to_thread(self._copy, copy)
            except OSError as exc:
                self._events.failure("copy")
                log.warning("adapter %s: copy %d of %d to %s failed: %s", shown(copy.name),
                            attempt, MAX_ATTEMPTS, self.mirror, exc)  # fmt: skip
                if attempt == MAX_ATTEMPTS:
                    break
                await self._clock.sleep(RETRY.delay(attempt - 1))
                continue
            copy.ok = True
            self.made.add(copy.name)
            self._events.landed(time.perf_counter() - copy.seen)
            break
        if not copy.ok:
            self._events.failure("gave_up")
            log.error("adapter %s: not mirrored to %s after %d attempts", shown(copy.name),
                      self.mirror, MAX_ATTEMPTS)  # fmt: skip
        await asyncio.to_thread(shutil.rmtree, copy.snapshot, True)
        copy.done.set()

    def _copy(self, copy: _Copy) -> None:
        """Snapshot -> ``M/.<name>.tmp`` -> renamed ``M/<name>`` (blocking; raises OSError)."""
        final = self.mirror / copy.name
        if _same(copy.snapshot, final):
            return
        self.mirror.mkdir(parents=True, exist_ok=True)
        tmp = self.mirror / f".{copy.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(copy.snapshot, tmp, copy_function=self.copy_file)
        if final.exists():  # other bytes under this name: set aside, then replaced
            old = self.mirror / f".{copy.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)

    async def _prune(self, name: str) -> None:
        if name not in self.made:
            return
        try:
            await asyncio.to_thread(shutil.rmtree, self.mirror / name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._events.failure("prune")
            log.warning("adapter %s: its mirror copy was not pruned: %s", shown(name), exc)
        self.made.discard(name)

    # -- lifetime ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The scan and the worker for the proxy's lifetime. Snapshots a dead process left are
        removed first; at exit the worker may land what is left for up to ``DRAIN_S``."""
        await asyncio.to_thread(shutil.rmtree, self.local / SNAPSHOTS, True)
        scan = asyncio.create_task(
            run_every(self._clock, lambda: self.interval_s, self.scan, task="mirror",
                      failed=self._failed), name="mirror-scan",
        )  # fmt: skip
        worker = asyncio.create_task(self.work(), name="mirror-worker")
        try:
            yield
        finally:
            await _stop(scan)
            if self._jobs:
                log.info("adapter mirror: landing %d version(s) before exit", self.backlog)
                await _first(self._empty.wait(), self._clock.sleep(DRAIN_S))
            await _stop(worker)
            if self.backlog:
                log.warning("adapter mirror: %d version(s) not landed at exit", self.backlog)


def _same(snapshot: Path, final: Path) -> bool:
    """``final`` holds exactly the snapshot's files, byte for byte."""
    try:
        names = sorted(os.listdir(snapshot))
        if not final.is_dir() or sorted(os.listdir(final)) != names:
            return False
        return all(filecmp.cmp(snapshot / n, final / n, shallow=False) for n in names)
    except OSError:
        return False


async def _first(*aws: Coroutine[Any, Any, Any]) -> None:
    """Until the first of ``aws`` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _number(name: str) -> int:
    number = version_number(name)
    return number if number is not None else -1
