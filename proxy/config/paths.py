"""The directories the settings name, checked before anything starts: each check returns one line
that says what is wrong with the path and what to do, or None. Standard library only; nothing is
created. (``rollout-replica`` and ``rollout-trainer`` check theirs with ``directory_problem``.)

- ``directory_problem``: a directory to write into that is neither there nor can be made (the
  nearest part of its path that exists is a file, or not writable by this user);
- ``path_problem``: the proxy's: ``--state-dir``, ``--adapters-local`` and ``--adapters-mirror``
  are written into; ``--adapters-dir`` is only read, and may appear late (a bucket mounting), but
  never under a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from proxy.config.settings import Settings


def directory_problem(flag: str, path: Path, *, write: bool = True) -> str | None:
    """Why ``path`` can be neither used nor made as a directory here (``write``: written into
    by this user), or None."""
    for part in (path, *path.parents):
        if not part.exists():
            continue
        if not part.is_dir():
            return f"{flag} {path}: {part} is a file, not a directory"
        if write and not os.access(part, os.W_OK | os.X_OK):
            return f"{flag} {path}: {part} is not writable by this user"
        return None
    return None


def path_problem(settings: Settings) -> str | None:
    """The first of the proxy's directories that cannot work, said in one line, or None."""
    adapters = settings.adapters
    written = (
        ("--state-dir", adapters.state_dir),
        ("--adapters-local", adapters.local),
        ("--adapters-mirror", adapters.mirror),
    )
    for flag, path in written:
        if path is not None and (problem := directory_problem(flag, path)):
            return problem
    if adapters.dir is not None:
        return directory_problem("--adapters-dir", adapters.dir, write=False)
    return None
