"""What an A/B compares, and where each side's code is.

A side is ``proxy`` (this checkout's rollout-proxy), ``passthrough`` (the bare aiohttp + uvloop
forwarder, ``benchmarks.harness.passthrough``) or ``proxy@REV`` (the proxy at a git revision).
Another revision's tree is extracted from this repository (``git archive``, nothing checked out,
no worktree registered) into a temporary directory that is removed when the run ends. Each side
runs with its tree as its working directory and first on ``PYTHONPATH``, with the same Python and
venv; before it runs, a child Python started the same way is asked where ``proxy`` comes from,
so a side never measures another build than the one it names (an editable install of another
checkout would otherwise win when the tree is not first on the path).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[3]  # this checkout: benchmarks/suites/ab/ is in it
GIT_TIMEOUT_S = 120.0
KINDS = ("proxy", "passthrough")


@dataclass(frozen=True, slots=True)
class Target:
    kind: Literal["proxy", "passthrough"]
    rev: str | None = None  # proxy@REV: the proxy at this git revision

    @property
    def spec(self) -> str:
        """As the command line names it."""
        return self.kind if self.rev is None else f"{self.kind}@{self.rev}"


def parse_target(text: str) -> Target:
    """``--a``/``--b``: ``proxy``, ``passthrough`` or ``proxy@REV`` (REV resolved when it runs)."""
    if text == "proxy":
        return Target("proxy")
    if text == "passthrough":
        return Target("passthrough")
    kind, at, rev = text.partition("@")
    if kind == "proxy" and at and rev.strip():
        return Target("proxy", rev.strip())
    raise argparse.ArgumentTypeError(
        f"proxy, passthrough or proxy@REV (REV a git revision: a commit, a tag, HEAD~1), "
        f"not {text!r}"
    )


@dataclass(frozen=True, slots=True)
class Build:
    """Where a side's code is and what it is."""

    tree: Path
    label: str  # as the output names it
    commit: str | None  # the proxy's commit (None: the pass-through)

    @property
    def env(self) -> Mapping[str, str]:
        """The environment its processes run in: its tree first on ``PYTHONPATH``."""
        rest = os.environ.get("PYTHONPATH")
        path = str(self.tree) if not rest else f"{self.tree}{os.pathsep}{rest}"
        return {**os.environ, "PYTHONPATH": path}


@contextlib.contextmanager
def builds(targets: Sequence[Target], root: Path = ROOT) -> Iterator[dict[Target, Build]]:
    """Each target's build; the trees of other revisions live until the ``with`` ends."""
    with tempfile.TemporaryDirectory(prefix="rollout-proxy-ab-") as tmp:
        found: dict[Target, Build] = {}
        for target in dict.fromkeys(targets):
            found[target] = _build(target, root, Path(tmp))
        yield found


def _build(target: Target, root: Path, tmp: Path) -> Build:
    if target.kind == "passthrough":
        return Build(root, "passthrough (bare aiohttp + uvloop)", None)
    if target.rev is None:
        commit = _git(root, "rev-parse", "HEAD")
        local = _git(root, "status", "--porcelain", "--untracked-files=no")
        edits = " + uncommitted changes" if local else ""
        build = Build(root, f"proxy (this checkout at {commit[:9]}{edits})", commit)
    else:
        commit = resolve(root, target.rev)
        tree = tmp / commit
        if not tree.exists():
            extract(root, commit, tree)
        build = Build(tree, f"proxy@{target.rev} ({commit[:9]})", commit)
    _check_import(build)
    return build


def resolve(root: Path, rev: str) -> str:
    """The full hash of commit ``rev``; RuntimeError when it names none."""
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except RuntimeError:
        raise RuntimeError(f"proxy@{rev}: {rev!r} names no commit of {root}") from None


def extract(root: Path, commit: str, tree: Path) -> None:
    """``commit``'s files (as ``git archive`` gives them) into ``tree``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit],
        cwd=root,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
    )
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {commit}: {archive.stderr.decode().strip()}")
    tree.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")


def _check_import(build: Build) -> None:
    where = subprocess.run(
        [sys.executable, "-c", "import proxy; print(proxy.__file__)"],
        cwd=build.tree,
        env=build.env,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
    )
    if where.returncode != 0:
        last = (where.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"{build.label}: its Python cannot import proxy ({last})")
    found = Path(where.stdout.strip()).resolve()
    if not found.is_relative_to(build.tree.resolve()):
        raise RuntimeError(f"{build.label}: its Python imports proxy from {found}, not its tree")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()
