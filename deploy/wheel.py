"""Build this project's wheel from the source tree and put it into the bucket for the jobs.

``pip wheel --no-deps`` builds only our own pure-Python wheel (its build backend comes from PyPI,
nothing else is fetched); ``python -m build --wheel`` is the fallback where pip is missing. The
wheel lands at ``<run>/code/<file>`` in the bucket, i.e. ``/lora/<run>/code/<file>`` in every job.
"""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from deploy.errors import DeployError
from deploy.install import wheel_filename

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class Uploader(Protocol):
    def upload(self, bucket: str, local: Path, destination: str) -> None: ...


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=False)


def build_command(root: Path, out_dir: Path) -> list[str]:
    """``pip wheel`` when pip is importable, else ``python -m build`` (one of them must be)."""
    if importlib.util.find_spec("pip") is not None:
        return [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(out_dir),
            str(root),
        ]
    if importlib.util.find_spec("build") is not None:
        return [sys.executable, "-m", "build", "--wheel", "--outdir", str(out_dir), str(root)]
    raise DeployError(
        "cannot build the wheel: neither pip nor build is installed in this Python "
        f"({sys.executable}); install one (`python -m ensurepip`), or use --code pypi"
    )


def build_wheel(root: Path, out_dir: Path, version: str, run: Runner = _run) -> Path:
    """Build the wheel of ``root`` into ``out_dir``; return its path."""
    command = build_command(root, out_dir)
    result = run(command)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-15:])
        raise DeployError(
            f"building the wheel failed (exit {result.returncode}): {shlex.join(command)}\n{tail}\n"
            "fix the build (run that command yourself to see all of it), or use --code pypi"
        )
    expected = out_dir / wheel_filename(version)
    if not expected.is_file():
        built = sorted(path.name for path in out_dir.glob("*.whl"))
        raise DeployError(
            f"the build produced {built or 'no wheel'}, not {expected.name}: check the name and "
            f"version in {root / 'pyproject.toml'}"
        )
    return expected


Builder = Callable[[Path, Path, str], Path]


def publish_wheel(
    uploader: Uploader,
    bucket: str,
    root: Path,
    version: str,
    destination_dir: str,
    build: Builder = build_wheel,
) -> str:
    """Build the wheel, upload it to ``destination_dir`` in ``bucket``; return its bucket path."""
    with tempfile.TemporaryDirectory(prefix="rollout-wheel-") as tmp:
        wheel = build(root, Path(tmp), version)
        destination = f"{destination_dir}/{wheel.name}"
        uploader.upload(bucket, wheel, destination)
    return destination
