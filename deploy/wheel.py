"""Build this project's wheel and put it into the bucket for the jobs.

From a source checkout, ``pip wheel --no-deps`` builds only our own pure-Python wheel (its build
backend comes from PyPI, nothing else is fetched); ``python -m build --wheel`` is the fallback
where pip is missing. Without a checkout (the project installed from a wheel), the installed
files are packed again into the wheel they came from (``repack_installed``: every file its
``RECORD`` lists under the install directory, byte for byte, with a fresh ``RECORD``; what the
installer added, console scripts and ``__pycache__`` left out, as pip makes those again). The
wheel lands at ``<run>/code/<file>`` in the bucket, i.e. ``/lora/<run>/code/<file>`` in every job.

The upload is huggingface_hub's ``batch_bucket_files``: a Xet write token from the Hub, the bytes
to the Xet storage through hf_xet, then one NDJSON ``/batch`` commit. Whatever fails on that way
(hf_xet missing, a refused token, the network, a refused commit) becomes a ``DeployError`` that
names the destination and what to do; no job is launched after a failed upload.
Setuptools builds in the checkout itself (its ``build/`` and ``*.egg-info``): two builds of one
checkout at once (two rehearsals) remove each other's files, so a build holds an exclusive lock
on the checkout's ``pyproject.toml`` while it runs (``building``; released however it ends).
``publish_code`` is what ``deploy up`` calls: the plan's ``--code`` says whether there is a wheel
to publish at all.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import importlib.util
import shlex
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Protocol

from deploy.errors import DeployError
from deploy.install import DISTRIBUTION, canonical, project_version, source_root, wheel_filename
from deploy.jobs import HUB_ERRORS, HubJobs
from deploy.plan import RunPlan

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]
BUILD_LOCK_TIMEOUT_S = 600.0  # waiting for another build of the same checkout to end
BUILD_LOCK_POLL_S = 0.2


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
        f"({sys.executable}); install one (`python -m ensurepip`), or use --code image"
    )


@contextlib.contextmanager
def building(root: Path, timeout_s: float = BUILD_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock on ``root``'s ``pyproject.toml``, waiting at most ``timeout_s`` for it."""
    with (root / "pyproject.toml").open("rb") as held:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DeployError(
                        f"another build of {root} held it for {timeout_s:.0f} s (a rehearsal's "
                        "or `up`'s, building the same checkout): let it end, then run this again"
                    ) from None
                time.sleep(BUILD_LOCK_POLL_S)
        yield  # closing the file releases the lock


def build_wheel(
    root: Path, out_dir: Path, version: str, run: Runner = _run,
    lock_timeout_s: float = BUILD_LOCK_TIMEOUT_S,
) -> Path:  # fmt: skip
    """Build the wheel of ``root`` into ``out_dir``, one build of ``root`` at a time; return
    its path."""
    command = build_command(root, out_dir)
    with building(root, lock_timeout_s):
        result = run(command)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-15:])
        raise DeployError(
            f"building the wheel failed (exit {result.returncode}): {shlex.join(command)}\n{tail}\n"
            "fix the build (run that command yourself to see all of it), or use --code image"
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

# What an installer adds to a distribution's metadata: not part of the wheel.
_INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"})
_PURE_WHEEL = (
    "Wheel-Version: 1.0\nGenerator: rollout-deploy\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
)


def installed_root() -> Path:
    """The directory (site-packages) this project is installed into."""
    return Path(str(metadata.distribution(DISTRIBUTION).locate_file("")))


def repack_installed(root: Path, out_dir: Path, version: str) -> Path:
    """The wheel of the ``version`` of this project installed in ``root`` (a ``Builder``)."""
    found = [
        dist
        for dist in metadata.distributions(path=[str(root)])
        if canonical(dist.metadata["Name"] or "") == DISTRIBUTION and dist.version == version
    ]
    files = found[0].files if found else None
    if not files:
        raise DeployError(
            f"no installed {DISTRIBUTION} {version} with a file list (RECORD) in {root} to make "
            "the jobs' wheel from: install it with pip, run deploy from a source checkout, or "
            "use --code image"
        )
    kept = sorted(
        str(path) for path in files
        if not str(path).startswith("..") and "__pycache__" not in path.parts
        and not (path.parent.name.endswith(".dist-info") and path.name in _INSTALLER_FILES)
    )  # fmt: skip
    info = f"{DISTRIBUTION.replace('-', '_')}-{version}.dist-info"
    wheel = out_dir / wheel_filename(version)
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:

        def add(name: str, data: bytes) -> None:
            archive.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")  # the wheel spec's

        for name in kept:
            add(name, (root / name).read_bytes())
        if f"{info}/WHEEL" not in kept:  # installed by something other than a wheel install
            add(f"{info}/WHEEL", _PURE_WHEEL.encode())
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


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
        try:
            uploader.upload(bucket, wheel, destination)
        except UPLOAD_ERRORS as exc:
            raise upload_error(exc, bucket, destination) from None
    return destination


# hf_xet maps its failures to OSError subclasses (ConnectionError, PermissionError, ...), the rest
# to RuntimeError or ValueError; huggingface_hub imports it lazily (ImportError where it is absent).
UPLOAD_ERRORS: tuple[type[Exception], ...] = (*HUB_ERRORS, ImportError, RuntimeError, ValueError)


def upload_error(exc: Exception, bucket: str, destination: str) -> DeployError:
    """What a failed upload means for the user, and what to do about it."""
    where = f"uploading the wheel to hf://buckets/{bucket}/{destination} failed"
    fallback = "or use --code image with images that hold the project (deploy/Dockerfile)"
    if isinstance(exc, ImportError):
        return DeployError(
            f"{where}: hf_xet is not installed ({exc}). Bucket uploads go through it: "
            f"`pip install hf_xet` (huggingface_hub brings it on x86_64 and arm64), {fallback}"
        )
    reason = " ".join(str(exc).split()) or type(exc).__name__
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    refused = status in (401, 403) or any(f"({code} " in reason for code in ("401", "403"))
    if refused or isinstance(exc, PermissionError):
        return DeployError(
            f"{where}: {reason}\nyour token lacks write access to the bucket {bucket}: use a token "
            f"that can write to the namespace {bucket.split('/')[0]} (`hf auth whoami` shows "
            f"whose it is), {fallback}"
        )
    return DeployError(
        f"{where}: {reason}\ncheck your network and --hub-endpoint, then run `deploy up` again "
        f"(nothing was launched yet), {fallback}"
    )


def publish_code(
    jobs: HubJobs, plan: RunPlan, say: Callable[[str], None], build: Builder = build_wheel
) -> None:
    """Build the wheel (from the checkout, else from the installed package) and upload it into
    the run's folder of the bucket (``--code wheel``)."""
    if plan.install.source != "wheel":
        say(f"code: {plan.install.requirement or 'already in the images'}")
        return
    root = source_root()
    if root is None:
        root, build = installed_root(), repack_installed
        say(f"packing the installed rollout-proxy ({root}) as a wheel and uploading it to "
            f"{plan.bucket}/{plan.code_dir}")  # fmt: skip
    else:
        say(f"building the wheel of {root} and uploading it to {plan.bucket}/{plan.code_dir}")
    destination = publish_wheel(
        jobs, plan.bucket, root, project_version("wheel"), plan.code_dir, build=build
    )
    say(f"uploaded hf://buckets/{plan.bucket}/{destination}")
