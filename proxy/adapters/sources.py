"""Sources of adapter versions: a (mounted) directory, or the Hub bucket API.

A source answers "which complete versions exist now": name -> (path as the replicas see it,
fingerprint). A version is complete when its directory holds ``adapter_config.json`` and a
weights file; TRL publishes with an atomic rename, and a bucket mount shows files as they land,
so an incomplete directory is simply not reported yet. A dot-name is never a version: TRL 1.16
stages each save as ``.<name>.tmp`` beside it (``save_lora_adapter``) and renames it into place;
a watcher that took the staging directory for a version would load it, and then find it gone.
The mirror keeps its snapshots under ``.mirror`` and stages its copies as dot-names too.
``watcher.Watcher`` polls a source.

``BucketSource.fetch`` downloads one version through the Hub API into the proxy's store (sizes
checked against the listing, sha256 recorded as for an upload), so a proxy without a mount can
push it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from adapter_receiver.store import Entry, Store
from adapter_receiver.wire import safe_name
from proxy.adapters.registry import Fingerprint

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")

log = logging.getLogger("proxy.watcher")

Found = dict[str, tuple[str, Fingerprint]]


class SourceMissing(OSError):
    """The source's place does not exist (yet): a bucket mount may appear after the proxy starts.
    The watcher says so and keeps looking; what it found before is kept, not reported removed."""


def staged(name: str) -> bool:
    """A directory being written (TRL's ``.<name>.tmp``) or held aside: not a version."""
    return name.startswith(".")


class Source(Protocol):
    interval_s: float

    def describe(self) -> str: ...

    async def scan(self) -> Found: ...


def fingerprint(path: Path, *, strict: bool = False) -> Fingerprint | None:
    """(name, size, mtime_ns) of the adapter's files, or None if it is not complete (or not
    there). ``strict``: a directory that is there but cannot be read raises that ``OSError``
    instead (else it is None too)."""
    try:
        entries = {entry.name: entry.stat() for entry in os.scandir(path) if entry.is_file()}
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        if strict:
            raise
        return None
    if CONFIG_FILE not in entries or not any(name in entries for name in WEIGHT_FILES):
        return None
    return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in entries.items()))


class DirectorySource:
    """Subdirectories of ``root`` (TRL's ``<output_dir>/.vllm_lora`` on the bucket mount).

    A directory that cannot be read is not an empty one: a bucket mount can fail a listing for a
    moment (EIO, a lost FUSE connection, a permission), and an empty answer would drop every
    version of the window from the fleet. So a listing that fails raises (the watcher says it and
    keeps what it knew), and a version directory that cannot be read keeps its last answer (one
    not answered before waits until it can be read); each distinct failure is logged once."""

    def __init__(self, root: Path, interval_s: float) -> None:
        self.root = root
        self.interval_s = interval_s
        self._last: Found = {}  # the last answer: what an unreadable version keeps
        self._said = ""  # the unreadable versions last logged

    def describe(self) -> str:
        return f"directory {self.root}"

    async def scan(self) -> Found:
        return await asyncio.to_thread(self._scan)

    def _scan(self) -> Found:
        try:
            entries = [e for e in os.scandir(self.root) if e.is_dir() and not staged(e.name)]
        except (FileNotFoundError, NotADirectoryError):
            raise SourceMissing(f"adapter directory {self.root} does not exist (yet)") from None
        found: Found = {}
        unreadable = []
        for entry in entries:
            try:
                files = fingerprint(Path(entry.path), strict=True)
            except OSError as exc:
                unreadable.append(f"{entry.name} ({exc.strerror or exc})")
                if entry.name in self._last:
                    found[entry.name] = self._last[entry.name]
                continue
            if files is not None:
                found[entry.name] = (str(Path(entry.path).absolute()), files)
        said = ", ".join(sorted(unreadable))
        if said and said != self._said:
            log.warning("adapter directory %s: cannot read %s: each kept as last seen (a new one "
                        "waits), read again in %g s", self.root, said, self.interval_s)  # fmt: skip
        self._said = said
        self._last = found
        return found


class BucketSource:
    """``NS/BUCKET/PREFIX`` through the Hub bucket API, for a proxy that has no mount.

    Paths sent to replicas are ``mount_path/PREFIX/NAME``: where the replicas mount the bucket.
    """

    def __init__(
        self,
        bucket_id: str,
        prefix: str,
        mount_path: str,
        interval_s: float,
        endpoint: str | None = None,
    ) -> None:
        self.bucket_id = bucket_id
        self.prefix = prefix.strip("/")
        self.mount_path = mount_path.rstrip("/")
        self.interval_s = interval_s
        self.endpoint = endpoint

    def describe(self) -> str:
        return f"bucket {self.bucket_id}/{self.prefix}"

    async def scan(self) -> Found:
        return await asyncio.to_thread(self._scan)

    def covers(self, path: str) -> str | None:
        """The version name when ``path`` is where the replicas' mount shows one of ours."""
        base = "/".join(p for p in (self.mount_path, self.prefix) if p)
        head, _, name = path.rstrip("/").rpartition("/")
        return name if head == base and safe_name(name) else None

    def fetch(self, name: str, store: Store, origin: str) -> Entry:
        """Download version ``name`` into ``store`` (blocking; raises on any failure)."""
        from huggingface_hub import HfApi
        from huggingface_hub._buckets import BucketFile

        api = HfApi(endpoint=self.endpoint)
        folder = "/".join(p for p in (self.prefix, name) if p)
        listing = api.list_bucket_tree(self.bucket_id, prefix=folder, recursive=True)
        wanted = [
            item for item in listing
            if isinstance(item, BucketFile) and item.path.rpartition("/")[0] == folder
            and safe_name(item.path.rpartition("/")[2])
        ]  # fmt: skip
        if not wanted:
            raise FileNotFoundError(f"{self.bucket_id}/{folder} lists no file")
        tmp = store.reserve(name, [int(item.size) for item in wanted])
        try:
            pairs = [(item, tmp / item.path.rpartition("/")[2]) for item in wanted]
            self._download(api, pairs)
            for item, local in pairs:
                if local.stat().st_size != int(item.size):
                    raise OSError(f"{item.path}: downloaded {local.stat().st_size} bytes")
            files = [(local.name, local.stat().st_size, sha256_of(local)) for _, local in pairs]
            entry, _ = store.publish(tmp, name, files, origin)
        except BaseException:
            store.discard(tmp)
            raise
        return entry

    def _download(self, api: Any, pairs: list[tuple[Any, Path]]) -> None:
        api.download_bucket_files(self.bucket_id, files=pairs, raise_on_missing_files=True)

    def _scan(self) -> Found:
        from huggingface_hub import HfApi
        from huggingface_hub._buckets import BucketFile

        api = HfApi(endpoint=self.endpoint)
        files: dict[str, list[tuple[str, int, int]]] = {}
        prefix = f"{self.prefix}/" if self.prefix else ""
        listing = api.list_bucket_tree(self.bucket_id, prefix=self.prefix or None, recursive=True)
        for item in listing:
            if not isinstance(item, BucketFile) or not item.path.startswith(prefix):
                continue
            parts = item.path[len(prefix) :].split("/")
            if len(parts) != 2 or staged(parts[0]):
                continue
            mtime = int(item.mtime.timestamp() * 1e9) if item.mtime is not None else 0
            files.setdefault(parts[0], []).append((parts[1], int(item.size), mtime))
        found: Found = {}
        for name, entries in files.items():
            names = {entry[0] for entry in entries}
            if CONFIG_FILE in names and names.intersection(WEIGHT_FILES):
                path = "/".join(p for p in (self.mount_path, self.prefix, name) if p)
                found[name] = (path, tuple(sorted(entries)))
        return found


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes (blocking)."""
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return hasher.hexdigest()
