"""Where a version's bytes come from, to push them, and where the replicas' mount shows it; and
what the bytes say of it: its content digest (its identity) and the trainer's probe reference.

In order: the proxy's own receiver store when the path is one of its entries (a relay pushed it
here; the mount shows it at the upload's origin); the path itself when this proxy can read it
(beside the trainer, or through its own mount); a download through the Hub into the store (a
bucket source and no mount). A version nobody here can read loads from the mount only. With a
``Mirror``, a path in its local directory (TRL's, on the trainer's disk) is snapshotted for the
bucket at once and mounts at its bucket copy (``Version.mount``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from adapter_receiver.reference import Reference
from adapter_receiver.store import Entry, Store
from adapter_receiver.wire import content_digest, shown
from proxy.adapters.attest.probe import read_reference
from proxy.adapters.mirror import Mirror
from proxy.adapters.push import Unreadable, list_files
from proxy.adapters.registry import Fingerprint, Version
from proxy.adapters.sources import fingerprint, sha256_of

log = logging.getLogger("proxy.adapters")

# fetch(name, mount path): download a version into the store (the Hub bucket source); None
# when that path is not one of the source's.
Fetch = Callable[[str, str], Entry | None]


class Origins:
    def __init__(
        self, store: Store | None, mirror: Mirror | None, fetch: Fetch | None, pushing: bool
    ) -> None:
        self.store, self.mirror, self._fetch, self._pushing = store, mirror, fetch, pushing

    async def of_load(self, name: str, path: str) -> Version:
        """The version a client's load names."""
        store = self.store
        entry = await asyncio.to_thread(store.lookup, path) if store is not None else None
        if entry is not None:
            reference = await asyncio.to_thread(read_reference, entry.path)
            return Version(name, path, "client", None, entry.origin, str(entry.path),
                           entry.digest, reference)  # fmt: skip
        mount = await self._mirrored(name, path)
        files = await asyncio.to_thread(fingerprint, Path(path))
        version = Version(name, path, "client", files, mount, path if files else None)
        return await self._fetched(await self._read(version))

    async def of_source(self, name: str, path: str, files: Fingerprint) -> Version:
        """The version a watcher found (``path``: where the replicas' mount shows it)."""
        readable = await asyncio.to_thread(os.path.isdir, path)  # on this proxy's mount
        mount = await self._mirrored(name, path)
        version = Version(name, path, "bucket", files, mount, path if readable else None)
        return await self._fetched(await self._read(version))

    @staticmethod
    async def _read(version: Version) -> Version:
        """With its digest and reference, when this proxy can read its files."""
        if version.files is None:
            return version
        digest, reference = await asyncio.to_thread(_identity, version.files)
        return replace(version, digest=digest, reference=reference)

    async def _mirrored(self, name: str, path: str) -> str | None:
        mirror = self.mirror
        if mirror is None or mirror.covers(path) != name:
            return None
        await mirror.saw(name)
        return mirror.target(name)

    async def _fetched(self, version: Version) -> Version:
        """A version to push that this proxy cannot read: its copy, downloaded once."""
        if version.files is not None or self._fetch is None or not self._pushing:
            return version
        store = self.store
        assert store is not None  # a fetch needs a store to download into
        entry = await asyncio.to_thread(store.by_origin, version.where)
        if entry is None:
            try:
                entry = await asyncio.to_thread(self._fetch, version.name, version.where)
            except Exception as exc:  # the Hub failed: the replicas load from their mounts
                log.warning("adapter %s not downloaded (%s: %s): loading from the mount",
                            shown(version.name), type(exc).__name__, exc)  # fmt: skip
                return version
        if entry is None:
            return version
        reference = await asyncio.to_thread(read_reference, entry.path)
        return replace(version, files=str(entry.path), digest=entry.digest, reference=reference)


def _identity(directory: str) -> tuple[str | None, Reference | None]:
    """The content digest of the files a push would send, and the probe reference. Blocking."""
    try:
        specs = list_files(Path(directory))
        files = [(s.name, s.size, sha256_of(Path(directory) / s.name)) for s in specs]
    except (Unreadable, OSError):
        return None, None
    return content_digest(files), read_reference(directory)
