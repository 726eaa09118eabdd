"""Adapter versions on local disk, as a receiver keeps them. Standard library only; blocking
calls (a receiver runs them in worker threads, off its event loop).

Layout under ``root``::

    .lock                             taken (flock) while the usage or the entries change
    .usage                            {"bytes": B, "entries": E}: what is charged, kept O(1)
    .tmp/<name>.<charge>.<random>/    uploads in progress; the name carries the charge reserved
    .tmp/.gone.<random>/              what is being deleted: renamed aside under the lock (so a
                                      release happens once), removed once the lock is free
    <name>/<digest16>/                published entries: the adapter's files and META

Invariants:
- An entry appears by one ``rename`` of a complete directory whose files were each checked
  (size, sha256) and fsynced: a reader (vLLM) never sees a partial adapter. Entries are named
  by content, so concurrent uploads of one name either land on one entry (same bytes: the
  second is discarded) or on two (different bytes), never on a mixed one.
- What is charged, for entries published and uploads in progress, never exceeds
  ``max_store_bytes``, and their count never exceeds ``max_entries``: a new upload that does not
  fit is refused (507); nothing is ever deleted to make room. An entry is charged what it takes
  on disk, not only its content (``charge``): each file a filesystem block at least plus an
  inode's worth, each entry its directory and META, so a thousand empty files are not free.
  The charge is kept in ``.usage`` under the lock, so ``reserve`` reads one small file instead of
  every entry; it changes only with ``reserve``, ``discard`` (an upload that failed, or whose
  bytes were there already) and ``drop``, and a process killed mid-upload leaves its
  reservation charged until ``reset`` (its replica starts again).
- Entries of a name are deleted only by ``drop(name)``, which the receiver calls after that name
  was unloaded on its replica (vLLM may reload an adapter from its path at any time before).
- The state is the directory itself (several server processes may share one store); ``reset``
  empties it when the replica starts.
- The root is claimed before anything in it is touched (``claimable``): it is created private
  (0700), or it is an existing directory of this user that no one else may write. A symlink, a
  directory of another user or one others can write is refused (``StoreError``): a store path
  under a shared temp directory is predictable, and a planted link would otherwise have its
  target emptied. Nothing is ever followed or deleted outside the root.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from adapter_receiver.wire import UploadError, content_digest, safe_name

META = ".rollout.json"
TMP = ".tmp"
USAGE = ".usage"
GONE = ".gone."  # in .tmp: what is being deleted, renamed aside first
BLOCK = 4096  # a file's content is charged in whole filesystem blocks
FILE_OVERHEAD = BLOCK  # and an inode and directory entry on top (an empty file costs this)
ENTRY_OVERHEAD = 2 * BLOCK  # an entry's directory and its META
MAX_ENTRIES = 1024  # entries published plus uploads in progress (an inode bound)
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    digest: str
    path: Path
    bytes: int
    origin: str | None
    files: tuple[tuple[str, int, str], ...]  # (file name, size, sha256)

    @property
    def charge(self) -> int:
        return charge(size for _, size, _ in self.files)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "digest": self.digest,
            "path": str(self.path),
            "bytes": self.bytes,
            "charged": self.charge,  # what it counts against the store's cap (``charge``)
            "origin": self.origin,
            "files": [{"name": n, "size": s, "sha256": d} for n, s, d in self.files],
        }


class FileSink:
    """One file of an upload being written: hashed as written, fsynced at the end."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, _OPEN_FLAGS, 0o644)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        self._hash.update(data)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.size += len(data)

    def write_all(self, pieces: list[memoryview]) -> None:
        for piece in pieces:
            self.write(piece)

    def finish(self) -> str:
        """fsync and close; returns the hex sha256 of what was written."""
        try:
            os.fsync(self._fd)
        finally:
            self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class StoreError(ValueError):
    """The store's root cannot be claimed safely; the message says why and what to do."""


def refusal(why: str) -> StoreError:
    """The error (and its message) for a store root refused because of ``why``."""
    return StoreError(
        f"adapter store refused: {why}; name a private directory (--adapter-store) instead"
    )


def claimable(root: Path) -> str | None:
    """Why ``root`` may not be used as a store (None: it may: absent, or a directory of this
    user that only this user can write)."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return f"{root} lies under a file, not a directory"
    if stat.S_ISLNK(info.st_mode):
        return f"{root} is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return f"{root} is not a directory"
    if info.st_uid != os.getuid():
        return f"{root} belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022:
        return f"{root} can be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def charge(sizes: Iterable[int]) -> int:
    """What an entry of files of ``sizes`` is charged against the store's cap."""
    blocks = sum(-(-size // BLOCK) * BLOCK + FILE_OVERHEAD for size in sizes)
    return ENTRY_OVERHEAD + blocks


@dataclass(frozen=True, slots=True)
class Usage:
    bytes: int = 0
    entries: int = 0


class Store:
    def __init__(self, root: Path, max_store_bytes: int, max_entries: int = MAX_ENTRIES) -> None:
        root = Path(root)
        # The parents resolved (the root's path as vLLM will see it), the root itself never:
        # a symlink there is refused at ``reset``, not followed.
        self.root = Path(os.path.realpath(root.parent)) / root.name
        self.max_store_bytes = max_store_bytes
        self.max_entries = max_entries

    # -- lifecycle -------------------------------------------------------------------------

    def reset(self, keep: Iterable[Path] = ()) -> None:
        """Claim the root and empty it (its replica starts with no adapter loaded); ``keep``:
        entries left in place (a proxy restarting keeps the copies it still wants to push)."""
        why = claimable(self.root)
        if why is not None:
            raise refusal(why)
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.root, 0o700)
        except OSError as exc:  # a parent not writable here, a read-only filesystem
            raise refusal(f"cannot make {self.root} ({exc.strerror})") from None
        # Again: something planted between the check and the mkdir (which then found it there)
        # is refused too. Once the directory is ours, a sticky temp dir keeps it ours.
        why = claimable(self.root)
        if why is not None:
            raise refusal(why)
        kept = {self.root / p.parent.name / p.name for p in keep}
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                for entry in _dirs(child) if child.name != TMP else ():
                    if entry not in kept:
                        shutil.rmtree(entry, ignore_errors=True)
                if child.name == TMP or not any(child.iterdir()):
                    shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        (self.root / TMP).mkdir()
        with self._locked():
            self._write_usage(self._recount() if kept else Usage())

    # -- an upload -------------------------------------------------------------------------

    def reserve(self, name: str, sizes: Sequence[int]) -> Path:
        """A fresh directory for an upload of files of ``sizes``; 507 if the store cannot hold
        it (its charge, or one more entry)."""
        cost = charge(sizes)
        with self._locked():
            usage = self._read_usage()
            if usage.entries + 1 > self.max_entries:
                raise UploadError(
                    507,
                    f"the store holds {usage.entries} adapter entries, its most (it frees "
                    "space when adapters are unloaded)",
                )
            if usage.bytes + cost > self.max_store_bytes:
                raise UploadError(
                    507,
                    f"the store holds {usage.bytes} bytes; {cost} more (the upload's files on "
                    f"disk) would exceed its {self.max_store_bytes} (it frees space when "
                    "adapters are unloaded)",
                )
            tmp = self.root / TMP / f"{name}.{cost}.{secrets.token_hex(6)}"
            self._write_usage(Usage(usage.bytes + cost, usage.entries + 1))  # charged first:
            try:
                tmp.mkdir(parents=True)  # a folder on disk is never left uncharged
            except OSError:
                self._write_usage(usage)
                raise
            return tmp

    def open_file(self, tmp: Path, name: str) -> FileSink:
        return FileSink(tmp / name)

    def publish(
        self, tmp: Path, name: str, files: list[tuple[str, int, str]], origin: str | None
    ) -> tuple[Entry, bool]:
        """Move a complete upload into place; (entry, False) when the same bytes were there."""
        digest = content_digest(files)
        meta = {"name": name, "digest": digest, "origin": origin, "files": sorted(files)}
        _write_synced(tmp / META, json.dumps(meta).encode())
        _fsync_dir(tmp)
        final = self.root / name / digest[:16]
        created = False
        gone = None
        with self._locked():  # a drop(name) counts what it frees: never mid-rename
            (self.root / name).mkdir(exist_ok=True)
            try:
                os.rename(tmp, final)  # the reservation's charge becomes the entry's
            except OSError:  # the same bytes were published meanwhile
                if not final.is_dir():
                    raise
                gone = self._release_locked(tmp)
            else:
                created = True
                _fsync_dir(self.root / name)
        _remove(gone)
        entry = self._entry(final)
        if entry is None:
            raise UploadError(500, f"adapter {name} vanished while it was published")
        return entry, created

    def discard(self, tmp: Path) -> None:
        """Remove an upload in progress and release its charge; a second call does nothing.
        The lock is held for one rename only (the files go after it is released)."""
        with self._locked():
            gone = self._release_locked(tmp)
        _remove(gone)

    def _release_locked(self, tmp: Path) -> Path | None:
        """Move ``tmp`` aside (one rename: it happens once) and release its charge; where it
        went, for removal once the lock is released, or None if it was not there."""
        if tmp.parent != self.root / TMP or not tmp.is_dir() or tmp.is_symlink():
            return None
        gone = self._tombstone()
        try:
            os.rename(tmp, gone)
        except OSError:
            return None
        with contextlib.suppress(ValueError, IndexError):
            cost = int(tmp.name.rsplit(".", 2)[1])
            usage = self._read_usage()
            self._write_usage(Usage(max(usage.bytes - cost, 0), max(usage.entries - 1, 0)))
        return gone

    def _tombstone(self) -> Path:
        """A fresh name in ``.tmp`` for what is being deleted (never a reservation's name)."""
        return self.root / TMP / f"{GONE}{secrets.token_hex(6)}"

    # -- what is stored --------------------------------------------------------------------

    def drop(self, name: str) -> int:
        """Delete every entry of ``name`` (it was unloaded); returns the charge freed."""
        if not safe_name(name):
            return 0
        gone = None
        with self._locked():  # held for a rename; the files go after it is released
            dropped = [e for d in _dirs(self.root / name) if (e := self._entry(d)) is not None]
            if (self.root / name).is_dir():
                gone = self._tombstone()
                os.rename(self.root / name, gone)
            freed = sum(e.charge for e in dropped)
            usage = self._read_usage()
            self._write_usage(
                Usage(max(usage.bytes - freed, 0), max(usage.entries - len(dropped), 0))
            )
        _remove(gone)
        return freed

    def entries(self) -> list[Entry]:
        found = []
        for name_dir in _dirs(self.root):
            if safe_name(name_dir.name):
                found += [e for d in _dirs(name_dir) if (e := self._entry(d)) is not None]
        return found

    def used(self) -> int:
        """What is charged: entries published and uploads in progress, as on disk."""
        return self._read_usage().bytes

    def _read_usage(self) -> Usage:
        """The usage file; if it is gone or damaged (a temp cleaner, a crash), what is on disk
        recounted, so the caps never fail open."""
        try:
            data = json.loads((self.root / USAGE).read_bytes())
            return Usage(int(data["bytes"]), int(data["entries"]))
        except (OSError, ValueError, KeyError, TypeError):
            return self._recount()

    def _recount(self) -> Usage:
        entries = self.entries()
        charged, count = sum(e.charge for e in entries), len(entries)
        for tmp in _dirs(self.root / TMP):
            with contextlib.suppress(ValueError, IndexError):
                charged += int(tmp.name.rsplit(".", 2)[1])  # an upload in progress
                count += 1
        return Usage(charged, count)

    def _write_usage(self, usage: Usage) -> None:
        """Replace ``.usage`` (under the lock): a reader sees the old or the new, whole."""
        tmp = self.root / f"{USAGE}.{os.getpid()}"
        tmp.write_text(json.dumps({"bytes": usage.bytes, "entries": usage.entries}))
        os.replace(tmp, self.root / USAGE)

    def lookup(self, path: str) -> Entry | None:
        """The entry at ``path`` (as ``describe`` shows it), or None if it is not one of ours."""
        real = Path(os.path.realpath(path))
        if real.parent.parent != self.root:
            return None
        return self._entry(real)

    def by_origin(self, origin: str) -> Entry | None:
        """The newest entry uploaded with this ``origin``."""
        found = [e for e in self.entries() if e.origin == origin]
        return max(found, key=lambda e: e.path.stat().st_mtime_ns, default=None)

    def _entry(self, directory: Path) -> Entry | None:
        try:
            meta = json.loads((directory / META).read_bytes())
            files = tuple((str(n), int(s), str(d)) for n, s, d in meta["files"])
            return Entry(
                name=str(meta["name"]),
                digest=str(meta["digest"]),
                path=directory,
                bytes=sum(size for _, size, _ in files),
                origin=meta.get("origin"),
                files=files,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _remove(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _dirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _write_synced(path: Path, data: bytes) -> None:
    sink = FileSink(path)
    try:
        sink.write(data)
    finally:
        sink.finish()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
