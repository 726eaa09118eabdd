"""A rehearsed job's file system, made inside its own mount namespace.

A job on HF Jobs sees the bucket at the plan's mount path (``/lora``: TRL sends absolute adapter
paths, so every job sees the same one), and a ``/tmp`` and ``/etc/hosts`` of its own. Here the
job runs chrooted into a root of its own: a tmpfs mounted on an empty folder of the rehearsal's
(``Machine.root``) holding each entry of this machine's ``/`` (a folder bind-mounted with what is
mounted under it, a file bind-mounted, a link copied), so every path it reads or writes is this
machine's, with three exceptions:

- the mount path is a folder of the tmpfs with the bucket folder bound on it; a folder along the
  way that this machine has (``/data`` of ``/data/lora``) is shadowed as ``/`` is, one level at
  a time (``Machine.levels``), one it lacks is made in the tmpfs (a mount path under ``/tmp`` is
  made in the job's own ``/tmp``);
- the group's hosts file is bound over ``/etc/hosts``, the job's own folder over ``/tmp`` (this
  machine's ``/tmp`` is not bound at all);
- the binding of the folder that holds the root brings a copy of the root along (at the root's
  path inside the root): it is unmounted, so nothing inside loops back.

Cost: two mounts per entry of each shadowed folder (about 25 for ``/``), made once per job start.

Nothing is created outside the rehearsal's work folder and every mount lives in the job's mount
namespace (private propagation), gone with its last process: two rehearsals at once each have
their own ``/lora`` and leave this machine as it was. ``steps`` is pure (the listings come in,
``Machine.listings`` reads them); the job's command then runs from ``/``, as in an image without
a ``WORKDIR``, never from the rehearsal's folder (whose packages would shadow the installed ones),
after a marker file says its machine was made (``Machine.started``).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Literal

from deploy.specs import BucketMount

Step = tuple[str, ...]
TMPFS = ("mount", "-t", "tmpfs", "-o", "mode=0755", "rehearsal-root")


@dataclass(frozen=True)
class Entry:
    """One name in a folder of this machine."""

    name: str
    kind: Literal["dir", "link", "other"]
    target: str = ""  # a link's


def entries(folder: Path) -> tuple[Entry, ...]:
    """What ``folder`` holds, sorted by name (a folder that is a link counts as a link)."""
    found: list[Entry] = []
    with os.scandir(folder) as scan:
        for item in scan:
            if item.is_symlink():
                found.append(Entry(item.name, "link", os.readlink(item.path)))
            else:
                found.append(Entry(item.name, "dir" if item.is_dir() else "other"))
    return tuple(sorted(found, key=lambda entry: entry.name))


def under_tmp(path: str) -> bool:
    return PurePosixPath(path).is_relative_to("/tmp")


@dataclass(frozen=True)
class Machine:
    name: str  # the job's host name
    root: Path  # an empty folder of the rehearsal's; the job's / is mounted on it
    mount: BucketMount
    bucket_dir: Path
    hosts_file: Path
    tmp: Path  # the job's own /tmp
    started: Path  # written just before the job's command runs
    chroot: str  # the chroot program's path (it is in sbin, off the job's PATH)
    keep: tuple[Path, ...] = ()  # folders under /tmp the job must still see, carried into tmp

    @property
    def levels(self) -> list[tuple[str, str]]:
        """The folders shadowed one after the other, each with the name it leaves out (the next
        folder down to the mount path, made in the tmpfs): ``/``, then each folder above the
        mount path. One under ``/tmp`` is made in the job's own ``/tmp``: ``/`` alone, whole."""
        path = PurePosixPath(self.mount.mount_path)
        if under_tmp(str(path)):
            return [("/", "")]
        return [(str(folder), path.parts[len(folder.parts)]) for folder in reversed(path.parents)]

    def listings(self) -> dict[str, tuple[Entry, ...]]:
        """Each level this machine has as a folder (a link or nothing is made in the tmpfs)."""
        return {
            level: entries(Path(level))
            for level, _ in self.levels
            if Path(level).is_dir() and not Path(level).is_symlink()
        }

    def inside(self, path: str | PurePath) -> str:
        """Where ``path`` of the job's file system is, seen from outside its root."""
        return str(self.root) + str(PurePosixPath("/", path))


def _bind(machine: Machine, level: str, entry: Entry) -> list[Step]:
    source = str(PurePosixPath(level, entry.name))
    here = machine.inside(source)
    if entry.kind == "link":
        return [("ln", "-s", entry.target, here)]
    if entry.kind == "dir":
        return [("mkdir", here), ("mount", "--rbind", source, here)]
    return [("touch", here), ("mount", "--bind", source, here)]


def steps(machine: Machine, listings: dict[str, tuple[Entry, ...]]) -> list[Step]:
    """The commands, in order, that make ``machine``'s file system under its root (the module
    docstring's layout). Every path they create or mount on is under ``machine.root``, in the
    job's ``tmp``, or ``/etc/hosts`` and ``/tmp`` inside the root."""
    mount_path = PurePosixPath(machine.mount.mount_path)
    made: list[Step] = [("hostname", machine.name)]
    for folder in machine.keep:  # before /tmp is the job's own
        if folder.is_relative_to("/tmp"):
            made.append(
                ("mount", "--bind", str(folder), str(machine.tmp / folder.relative_to("/tmp")))
            )
    made.append((*TMPFS, str(machine.root)))
    for level, below in machine.levels:
        if level != "/":
            made.append(("mkdir", machine.inside(level)))
            if level not in listings:
                continue  # a folder this machine lacks: made in the tmpfs, deeper ones too
            made.append((*TMPFS, machine.inside(level)))
        left_out = {below, "tmp"} if level == "/" else {below}  # /tmp: the job's own
        for entry in listings.get(level, ()):
            if entry.name not in left_out:
                made += _bind(machine, level, entry)
    made += [
        ("umount", "--lazy", machine.inside(machine.root)),
        ("mount", "--bind", str(machine.hosts_file), machine.inside("/etc/hosts")),
        ("mkdir", machine.inside("/tmp")),
        ("mount", "--rbind", str(machine.tmp), machine.inside("/tmp")),
        ("mkdir", "-p", machine.inside(mount_path)),  # under /tmp: in the job's own
        ("mount", "--bind", str(machine.bucket_dir), machine.inside(mount_path)),
    ]
    if machine.mount.read_only:
        made.append(("mount", "-o", "remount,bind,ro", machine.inside(mount_path)))
    return made


def script(machine: Machine, listings: dict[str, tuple[Entry, ...]]) -> str:
    """``steps`` as one ``sh -c`` script that then runs the job's command (``"$@"``) from ``/``
    inside the root, once the marker file is written."""
    run = (
        f"exec {shlex.quote(machine.chroot)} {shlex.quote(str(machine.root))} "
        'sh -c \'cd / && : > "$0" && exec "$@"\' '
        f'{shlex.quote(str(machine.started))} "$@"'
    )
    return " && ".join([*(shlex.join(step) for step in steps(machine, listings)), run])
