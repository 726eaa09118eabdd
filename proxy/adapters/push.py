"""Pushing an adapter version into replicas' receivers (``wire``): each file read once per push,
whatever the number of replicas, within a memory bound.

- A reader reads the version's files in ``PIECE_BYTES`` pieces (in a worker thread, hashing as it
  reads) into a ``Tee``, each file followed by its sha256, as the upload format has it.
- Each replica's upload (``UpstreamClient.call`` with a ``Streamed`` body) takes the pieces in
  order. The tee holds at most ``buffer_bytes`` of pieces some live upload has not taken yet:
  the reader waits for the slowest upload. An upload that takes nothing for ``stall_s`` while
  the reader waits on it is cut off (cancelled; that replica falls back to the mount), so one
  stuck replica holds the others back for ``stall_s`` at most. Memory: ``buffer_bytes`` plus
  about one piece per upload in its socket's send path.
- ``Link`` paces all uploads together at ``rate`` bytes/s: the proxy's uplink, shared.

Each replica's push ends in a ``Pushed``: the replica-local path to load from, or the cause of
the fallback to the mount path (``FALLBACK_CAUSES``). A replica whose receiver answered 404
(none installed) is remembered and not pushed to again until ``forget`` (it joined anew).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, Literal

from adapter_receiver.wire import (
    CONTENT_TYPE,
    MAX_FILES,
    PREFIX,
    FileSpec,
    Manifest,
    adapter_file,
    safe_name,
)
from adapter_receiver.wire import content_digest as digest_of
from proxy.clock import Clock, TaskFailed
from proxy.fleet.replica import Replica
from proxy.upstream.client import Reply, UpstreamClient
from proxy.upstream.connpool import Streamed
from proxy.upstream.errors import ReplyError, UpstreamError

log = logging.getLogger("proxy.adapters")

PIECE_BYTES = 1 << 20
FallbackCause = Literal["no_receiver", "refused", "unreachable", "unreadable"]
FALLBACK_CAUSES: tuple[FallbackCause, ...] = ("no_receiver", "refused", "unreachable", "unreadable")


@dataclass(frozen=True, slots=True)
class Pushed:
    path: str | None = None  # where the replica stored it (load from here)
    cause: FallbackCause | None = None  # else why not (load from the mount)
    detail: str = ""
    bytes: int = 0
    seconds: float = 0.0


class Unreadable(Exception):
    """The version's files could not be read (gone, changed, not an adapter directory)."""


class Link:
    """All uploads' bytes together at most ``rate`` per second (each piece waits its turn)."""

    def __init__(self, rate: float, clock: Clock) -> None:
        self.rate = rate
        self._clock = clock
        self._free_at = 0.0

    async def take(self, size: int) -> None:
        now = self._clock.monotonic()
        self._free_at = max(self._free_at, now) + size / self.rate
        await self._clock.sleep(self._free_at - now)


class Tee:
    """One writer, ``consumers`` readers, each reading every piece in order; see the module
    docstring for the bound and the stall rule. ``on_stall(i)`` is told of a reader cut off."""

    def __init__(
        self, consumers: int, limit: int, stall_s: float, on_stall: Callable[[int], None]
    ) -> None:
        self._pieces: deque[bytes] = deque()
        self._base = 0  # index of _pieces[0]
        self._held = 0
        self._pos = [0] * consumers
        self._live = set(range(consumers))
        self._limit = limit
        self._stall_s = stall_s
        self._on_stall = on_stall
        self._closed = False
        self.error: BaseException | None = None
        self._changed = asyncio.Condition()

    async def put(self, piece: bytes) -> None:
        async with self._changed:
            while self._live and self._held and self._held + len(piece) > self._limit:
                try:
                    async with asyncio.timeout(self._stall_s):
                        await self._changed.wait()
                except TimeoutError:
                    for i in [i for i in self._live if self._pos[i] == self._base]:
                        self._live.discard(i)
                        self._on_stall(i)
                    self._trim()
            if self._live:
                self._pieces.append(piece)
                self._held += len(piece)
                self._changed.notify_all()

    async def get(self, i: int) -> bytes | None:
        async with self._changed:
            while self._pos[i] - self._base >= len(self._pieces):
                if self._closed:
                    if self.error is not None:
                        raise self.error
                    return None
                await self._changed.wait()
            piece = self._pieces[self._pos[i] - self._base]
            self._pos[i] += 1
            self._trim()
            self._changed.notify_all()
            return piece

    async def detach(self, i: int) -> None:
        async with self._changed:
            self._live.discard(i)
            self._trim()
            self._changed.notify_all()

    async def close(self, error: BaseException | None = None) -> None:
        async with self._changed:
            self._closed = True
            self.error = error
            self._changed.notify_all()

    @property
    def listening(self) -> bool:
        return bool(self._live)

    def _trim(self) -> None:
        while self._pieces and all(self._pos[i] > self._base for i in self._live):
            self._held -= len(self._pieces.popleft())
            self._base += 1


def list_files(directory: Path) -> tuple[FileSpec, ...]:
    """The files a version directory pushes: the regular files an adapter is made of
    (``wire.ADAPTER_FILES``), by name."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
        files = tuple(
            FileSpec(e.name, e.stat().st_size)
            for e in entries
            if e.is_file(follow_symlinks=False) and adapter_file(e.name)
        )
    except OSError as exc:
        raise Unreadable(f"cannot list {directory}: {exc.strerror}") from None
    if not files or len(files) > MAX_FILES:
        raise Unreadable(f"{directory} holds {len(files)} files (1 to {MAX_FILES} are pushed)")
    return files


def _read(handle: BinaryIO, size: int, hasher: hashlib._Hash) -> bytes:
    data = handle.read(size)
    hasher.update(data)
    return data


class _Push:
    """One version to some replicas: the reader and one upload per replica."""

    def __init__(self, pusher: Pusher, name: str, directory: Path, origin: str | None, n: int):
        self.pusher = pusher
        self.name = name
        self.directory = directory
        self.origin = origin
        loop = asyncio.get_running_loop()
        self.plan: asyncio.Future[tuple[bytes, Manifest]] = loop.create_future()
        self.plan.add_done_callback(lambda f: f.cancelled() or f.exception())  # always retrieved
        self.digests: list[tuple[str, int, str]] = []
        self.uploads: list[asyncio.Task[Pushed]] = []
        self.stalled: set[int] = set()
        self.tee = Tee(n, pusher.buffer_bytes, pusher.stall_s, self._cut)

    def _cut(self, i: int) -> None:
        self.stalled.add(i)
        self.uploads[i].cancel()

    async def read(self) -> None:
        try:
            specs = await asyncio.to_thread(list_files, self.directory)
            manifest = Manifest(specs, self.origin)
            self.plan.set_result((manifest.encode(), manifest))
            for spec in specs:
                if not self.tee.listening:
                    break
                await self._read_file(spec)
            await self.tee.close()
        except (OSError, Unreadable) as exc:
            await self._stop(exc if isinstance(exc, Unreadable) else Unreadable(str(exc)))
        except asyncio.CancelledError:  # every upload ended: nobody reads any more
            await self._stop(Unreadable("reading stopped"))
            raise
        except Exception as exc:  # a bug: reported, not raised; the uploads fall back
            self.pusher.report(exc)
            await self._stop(Unreadable(f"reading failed: {type(exc).__name__}"))

    async def _stop(self, error: Unreadable) -> None:
        if not self.plan.done():
            self.plan.set_exception(error)
        await asyncio.shield(self.tee.close(error))

    async def _read_file(self, spec: FileSpec) -> None:
        hasher = hashlib.sha256()
        handle = await asyncio.to_thread(open, self.directory / spec.name, "rb")
        try:
            left = spec.size
            while left and self.tee.listening:
                data = await asyncio.to_thread(_read, handle, min(PIECE_BYTES, left), hasher)
                if not data:
                    raise Unreadable(f"{spec.name} is shorter than its {spec.size} bytes")
                left -= len(data)
                await self.tee.put(data)
        finally:
            handle.close()
        self.digests.append((spec.name, spec.size, hasher.hexdigest()))
        await self.tee.put(hasher.hexdigest().encode())

    async def upload(self, i: int, replica: Replica) -> Pushed:
        started = time.perf_counter()
        try:
            line, manifest = await asyncio.shield(self.plan)
        except Unreadable as exc:
            await self.tee.detach(i)
            return Pushed(cause="unreadable", detail=str(exc))
        length = manifest.body_length(line)
        try:
            body = Streamed(self._body(i, line), length, CONTENT_TYPE)
            reply = await self.pusher.client.call(
                replica, "PUT", f"{PREFIX}/{self.name}", body=body, timeout_s=self.pusher.stall_s
            )
        except asyncio.CancelledError:
            if i not in self.stalled:
                raise
            return Pushed(cause="unreachable", detail=f"took no byte for {self.pusher.stall_s:g} s")
        except Unreadable as exc:
            return Pushed(cause="unreadable", detail=str(exc))
        except UpstreamError as exc:
            if isinstance(self.tee.error, Unreadable):
                return Pushed(cause="unreadable", detail=str(self.tee.error))
            return Pushed(cause="unreachable", detail=f"{type(exc).__name__}: {exc}")
        finally:
            await asyncio.shield(self.tee.detach(i))
        return self._answer(replica, reply, length, time.perf_counter() - started)

    async def _body(self, i: int, line: bytes) -> AsyncIterator[bytes]:
        link = self.pusher.link
        yield line
        while (piece := await self.tee.get(i)) is not None:
            if link is not None:
                await link.take(len(piece))
            yield piece

    def _answer(self, replica: Replica, reply: Reply, length: int, seconds: float) -> Pushed:
        status = reply.status
        if status == 404:
            self.pusher.receivers[replica.id] = False
            return Pushed(cause="no_receiver", detail="the receiver route answered 404")
        if status not in (200, 201):
            return Pushed(cause="refused", detail=f"HTTP {status}: {reply.body[:200]!r}")
        try:
            answer = reply.json()
            path, digest = answer["path"], answer["digest"]
        except (ReplyError, KeyError, TypeError):
            return Pushed(cause="refused", detail="the receiver's answer has no path")
        if digest != digest_of(self.digests):
            return Pushed(cause="refused", detail="the receiver stored other bytes")
        return Pushed(path=str(path), bytes=length, seconds=seconds)


class Pusher:
    def __init__(
        self,
        client: UpstreamClient,
        clock: Clock,
        *,
        buffer_bytes: int,
        stall_s: float,
        rate: float | None = None,
        probe_timeout_s: float = 2.0,
        failed: TaskFailed | None = None,
    ) -> None:
        self.client = client
        self._failed = failed  # reports an exception a reader survived
        self.buffer_bytes = buffer_bytes
        self.stall_s = stall_s
        self.probe_timeout_s = probe_timeout_s
        self.link = Link(rate, clock) if rate else None
        self.receivers: dict[str, bool] = {}  # replica id -> has a receiver (when known)

    def forget(self, replica_id: str) -> None:
        """Ask again next time (the replica joined anew: it may have changed)."""
        self.receivers.pop(replica_id, None)

    async def probe(self, replica: Replica) -> bool | None:
        """Whether ``replica`` has a receiver (``GET`` its listing); None when unsure."""
        try:
            reply = await self.client.call(replica, "GET", PREFIX, timeout_s=self.probe_timeout_s)
        except UpstreamError:
            return None
        if reply.status in (200, 404):
            self.receivers[replica.id] = reply.status == 200
            return reply.status == 200
        return None

    def start(
        self, name: str, directory: Path, origin: str | None, targets: list[Replica]
    ) -> dict[str, asyncio.Task[Pushed]]:
        """Push to every target at once; each task ends in that replica's ``Pushed``."""
        tasks: dict[str, asyncio.Task[Pushed]] = {}
        if not safe_name(name):
            # The name becomes a path segment of the upload's URL (``../../v1/completions``,
            # ``a#frag`` and ``a?x=1`` would name other routes or other entries): it is pushed
            # only if the receivers would take it, and otherwise loads from the mount.
            refused = Pushed(cause="refused", detail=f"the adapter name {name!r} is not pushed")
            return {r.id: asyncio.create_task(_known(refused)) for r in targets}
        live = []
        for replica in targets:
            if self.receivers.get(replica.id) is False:
                tasks[replica.id] = asyncio.create_task(_known(Pushed(cause="no_receiver")))
            else:
                live.append(replica)
        if live:
            push = _Push(self, name, directory, origin, len(live))
            for i, replica in enumerate(live):
                task = asyncio.create_task(push.upload(i, replica), name=f"push {name}")
                push.uploads.append(task)
                tasks[replica.id] = task
            reader = asyncio.create_task(push.read(), name=f"read {name}")
            for task in push.uploads:  # the reader lives as long as an upload does
                task.add_done_callback(partial(_stop_idle, reader, push))
        return tasks

    def report(self, exc: BaseException) -> None:
        """A reader survived an exception (a bug): counted and logged as the adapters' task."""
        if self._failed is not None:
            self._failed("adapters", exc)


def _stop_idle(reader: asyncio.Task[None], push: _Push, _: object) -> None:
    if all(task.done() for task in push.uploads):
        reader.cancel()


async def _known(result: Pushed) -> Pushed:
    return result
