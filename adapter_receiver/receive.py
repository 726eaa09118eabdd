"""The receiver: takes adapter uploads into a ``store.Store``, whatever HTTP server it lives in.
Standard library only: it runs inside vLLM's API server (``replica_entry.receiver``, pure ASGI),
in the simulated replica and in the proxy (aiohttp), each turning its request into a name, a
declared length and an async iterator of body chunks, and the ``Answer`` into its response.

What an upload may cost the sender, and only the sender:
- memory: at most ``chunk_bytes`` buffered per upload (written to disk by a worker thread as
  it fills), ``max_uploads`` at once (503 beyond);
- disk: ``max_adapter_bytes`` per adapter, checked from the manifest before any file byte is
  read (413), and the store's ``max_store_bytes`` (507);
- time: a body that stops arriving for ``idle_timeout_s``, or an upload not over within
  ``Limits.deadline_s`` (a minimum average rate: a trickle is no way around the idle rule), is
  abandoned (408).
Anything short of a complete, checked upload (bad manifest, wrong length, sha256 mismatch, a
client gone mid-body) publishes nothing and deletes what was written.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from adapter_receiver.store import FileSink, Store
from adapter_receiver.wire import (
    DIGEST_CHARS,
    MANIFEST_LIMIT,
    MAX_FILES,
    NAME_RULE,
    Manifest,
    UploadError,
    check_digest,
    error_body,
    parse_manifest,
    safe_name,
)

T = TypeVar("T")


class ClientGone(Exception):
    """The sender disconnected before its body was complete."""


@dataclass(frozen=True, slots=True)
class Limits:
    """``idle_timeout_s``: the longest gap between two chunks. ``min_rate`` and ``floor_s``: a
    whole upload must be over within ``floor_s + length / min_rate`` seconds (60 s plus 1 s a
    MiB: a sender trickling a byte every few seconds cannot hold an upload slot and its whole
    reservation for long; a pushing proxy on any real link is far faster)."""

    max_adapter_bytes: int = 1 << 30
    max_uploads: int = 8
    idle_timeout_s: float = 30.0
    chunk_bytes: int = 1 << 20
    min_rate: int = 1 << 20  # bytes/s, averaged over the whole upload
    floor_s: float = 60.0

    def deadline_s(self, length: int) -> float:
        return self.floor_s + length / self.min_rate


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any] = field(default_factory=dict)


def refusal(status: int, message: str) -> Answer:
    return Answer(status, error_body(status, message))


def authorized(header: str | None, key: str | None) -> bool:
    """``Authorization: Bearer KEY`` (constant-time); every request passes when ``key`` is None."""
    if key is None:
        return True
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.encode("utf-8", "surrogateescape"), key.encode()
    )


class _Body:
    """Reads exact byte counts from a chunk iterator, waiting at most ``idle_s`` per chunk."""

    def __init__(self, chunks: AsyncIterator[bytes], idle_s: float) -> None:
        self._chunks = chunks
        self._idle_s = idle_s
        self._pending = memoryview(b"")
        self.received = 0

    async def _more(self) -> bool:
        try:
            async with asyncio.timeout(self._idle_s):
                chunk = await anext(self._chunks)
        except StopAsyncIteration:
            return False
        except TimeoutError:
            raise UploadError(408, f"no upload bytes for {self._idle_s:g} s") from None
        self.received += len(chunk)
        self._pending = memoryview(chunk)
        return True

    async def line(self, limit: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            if not self._pending and not await self._more():
                raise UploadError(400, "the body ended inside the manifest line")
            cut = bytes(self._pending).find(b"\n")
            take = len(self._pending) if cut < 0 else cut + 1
            parts.append(bytes(self._pending[:take]))
            self._pending = self._pending[take:]
            size += take
            if size > limit:
                raise UploadError(400, f"the manifest line is longer than {limit} bytes")
            if cut >= 0:
                return b"".join(parts)

    async def take(self, count: int) -> AsyncIterator[memoryview]:
        """``count`` bytes, as the chunks that carry them."""
        while count:
            if not self._pending and not await self._more():
                raise UploadError(400, "the body ended before the manifest's files did")
            piece = self._pending[:count]
            self._pending = self._pending[len(piece) :]
            count -= len(piece)
            yield piece

    async def exact(self, count: int) -> bytes:
        return b"".join([bytes(p) async for p in self.take(count)])

    async def at_end(self) -> bool:
        return not self._pending and not await self._more()


class Receiver:
    def __init__(self, store: Store, limits: Limits, workers: int = 2) -> None:
        self.store = store
        self.limits = limits
        self._uploads = 0
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="adapter-receiver")

    async def _run(
        self, fn: Callable[..., T], *args: Any, undo: Callable[[T], object] | None = None
    ) -> T:
        """``fn(*args)`` in a worker thread. If this task is cancelled meanwhile (aiohttp cancels
        the handler when its client goes), the worker still runs to its end: its effect (a
        reservation, an open file, a rename) is waited for before the cancellation goes on, so
        the caller's clean-up sees it; ``undo`` takes back a result nobody will receive."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not future.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(future)
            if undo is not None and not future.cancelled() and future.exception() is None:
                undo(future.result())
            raise

    @property
    def uploads_in_progress(self) -> int:
        """Uploads being received now (``max_uploads`` at most): a sender's reset ends its
        upload here only once the handler has seen it."""
        return self._uploads

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def upload(self, name: str, length: int | None, chunks: AsyncIterator[bytes]) -> Answer:
        """Receive one upload; the answer says what was published (or why nothing was)."""
        if not safe_name(name):
            return refusal(400, f"adapter name {name[:80]!r} must be {NAME_RULE}")
        if length is None:
            return refusal(411, "an upload needs a Content-Length")
        most = self.limits.max_adapter_bytes + MANIFEST_LIMIT + MAX_FILES * DIGEST_CHARS
        if length > most:
            return refusal(413, self._too_large(length))
        if self._uploads >= self.limits.max_uploads:
            return refusal(503, f"{self._uploads} uploads in progress; retry shortly")
        self._uploads += 1
        deadline = self.limits.deadline_s(length)
        try:
            async with asyncio.timeout(deadline):
                return await self._receive(name, length, _Body(chunks, self.limits.idle_timeout_s))
        except TimeoutError:
            return refusal(
                408,
                f"the upload of {length} bytes took over {deadline:.0f} s (it must average at "
                f"least {self.limits.min_rate} bytes/s): nothing was kept",
            )
        except UploadError as exc:
            return refusal(exc.status, str(exc))
        except ClientGone:
            return refusal(400, "the sender disconnected before the upload was complete")
        finally:
            self._uploads -= 1

    async def _receive(self, name: str, length: int, body: _Body) -> Answer:
        line = await body.line(MANIFEST_LIMIT)
        manifest = parse_manifest(line[:-1])
        if manifest.total > self.limits.max_adapter_bytes:
            raise UploadError(413, self._too_large(manifest.total))
        if manifest.body_length(line) != length:
            raise UploadError(400, f"Content-Length {length} is not what the manifest declares")
        sizes = [spec.size for spec in manifest.files]
        tmp = await self._run(self.store.reserve, name, sizes, undo=self.store.discard)
        try:
            files = await self._files(tmp, manifest, body)
            if not await body.at_end():
                raise UploadError(400, "bytes after the last file")
            entry, created = await self._run(self.store.publish, tmp, name, files, manifest.origin)
        except BaseException:
            self.store.discard(tmp)  # nothing of a failed upload stays (a few unlinks)
            raise
        return Answer(201 if created else 200, entry.describe())

    async def _files(
        self, tmp: Path, manifest: Manifest, body: _Body
    ) -> list[tuple[str, int, str]]:
        done = []
        for spec in manifest.files:
            sink = await self._run(self.store.open_file, tmp, spec.name, undo=FileSink.close)
            try:
                await self._copy(body, spec.size, sink)
                digest = await self._run(sink.finish)
            finally:
                sink.close()
            check_digest(spec.name, await body.exact(DIGEST_CHARS), digest)
            done.append((spec.name, spec.size, digest))
        return done

    async def _copy(self, body: _Body, size: int, sink: FileSink) -> None:
        """Stream ``size`` bytes into ``sink``, ``chunk_bytes`` at a time, off the event loop
        (the pieces go to the worker as they came: no copy on the loop)."""
        buffered: list[memoryview] = []
        held = 0
        async for piece in body.take(size):
            buffered.append(piece)
            held += len(piece)
            if held >= self.limits.chunk_bytes:
                await self._run(sink.write_all, buffered)
                buffered, held = [], 0
        if buffered:
            await self._run(sink.write_all, buffered)

    def _too_large(self, size: int) -> str:
        return f"{size} bytes exceed the receiver's {self.limits.max_adapter_bytes} per adapter"

    async def listing(self) -> Answer:
        entries = await self._run(self.store.entries)
        used = await self._run(self.store.used)
        return Answer(
            200,
            {
                "adapters": [e.describe() for e in entries],
                "bytes": used,
                "max_store_bytes": self.store.max_store_bytes,
                "max_adapter_bytes": self.limits.max_adapter_bytes,
            },
        )

    async def unloaded(self, name: str) -> None:
        """``name`` was unloaded (or was not loaded) on this replica: its copies may go."""
        await self._run(self.store.drop, name)
