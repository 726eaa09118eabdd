"""How a job gets this project's code on top of a stock image.

Three sources, chosen with ``--code``:

- ``wheel``: ``deploy up`` builds the wheel from the source tree and uploads it into the run's
  folder of the bucket; every job mounts the bucket, so it installs ``/lora/<run>/code/<wheel>``.
- ``pypi``: the jobs install the released ``rollout-proxy==<version>`` from PyPI.
- ``image``: the image already holds the project (see ``deploy/Dockerfile``): nothing to install.

The job command becomes ``sh -c "python3 -m pip install ... && exec <entry point>"`` so the entry
point replaces the shell and receives the job's SIGTERM on cancel.

Replica jobs run on the vLLM image, whose packages vLLM was built and tested with: installing our
wheel with its dependencies there would upgrade some of them (our version floors come along) and
can break vLLM's imports. So a replica installs the wheel with ``--no-deps``, then only what
``replica_entry`` imports (``REPLICA_REQUIREMENTS``, with our version floors) under a constraints
file written from the image's own ``pip list``: a package the image has stays at its version, a
missing one is added (with its own dependencies, constrained the same way); an image whose
version is below our floor fails the job at start-up with pip's conflict message, instead of
breaking vLLM (or replica_entry's imports) later.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from deploy.errors import DeployError

CodeSource = Literal["wheel", "pypi", "image"]
DISTRIBUTION = "rollout-proxy"
PIP_INSTALL = ("python3", "-m", "pip", "install", "--no-cache-dir", "--quiet")
IMAGE_CONSTRAINTS = "/tmp/image-packages.txt"
IMAGE_CONFLICT = (
    "rollout-proxy: the packages of this image are older than replica_entry needs (see the pip "
    "conflict above; none was changed): use a newer --replica-image"
)
# The third-party distributions ``python -m replica_entry`` imports (tests check the list).
REPLICA_REQUIREMENTS = ("aiohttp", "orjson", "prometheus-client", "pydantic", "xxhash")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(spec: str) -> str:
    """The distribution a requirement names (``pydantic>=2.7,<3`` -> ``pydantic``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    return match.group(1) if match else spec


@dataclass(frozen=True)
class Install:
    """Where the code comes from, and the pip requirement to install before the entry point
    (``None``: baked into the image)."""

    source: CodeSource
    requirement: str | None
    replica_requirements: tuple[str, ...] = REPLICA_REQUIREMENTS

    def wrap(self, argv: Sequence[str], extra: str | None = None) -> tuple[str, ...]:
        """The job command running ``argv`` after the install (with ``extra``, e.g. ``trainer``)."""
        if self.requirement is None:
            return tuple(argv)
        requirement = f"{self.requirement}[{extra}]" if extra else self.requirement
        script = f"{shlex.join([*PIP_INSTALL, requirement])} && exec {shlex.join(argv)}"
        return ("sh", "-c", script)

    def wrap_into_image(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The job command running ``argv`` after an install that changes no package the image
        ships (see the module docstring)."""
        if self.requirement is None:
            return tuple(argv)
        needs = shlex.join([*PIP_INSTALL, "-c", IMAGE_CONSTRAINTS, *self.replica_requirements])
        steps = [
            f"python3 -m pip list --format=freeze > {IMAGE_CONSTRAINTS}",
            shlex.join([*PIP_INSTALL, "--no-deps", self.requirement]),
            f"({needs} || (echo {shlex.quote(IMAGE_CONFLICT)} >&2; exit 1))",
            f"exec {shlex.join(argv)}",
        ]
        return ("sh", "-c", " && ".join(steps))


def source_root() -> Path | None:
    """The source checkout this package runs from, if any (``pyproject.toml`` names us)."""
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return None
    with pyproject.open("rb") as handle:
        name = tomllib.load(handle).get("project", {}).get("name")
    return root if name == DISTRIBUTION else None


def default_source() -> CodeSource:
    """``wheel`` from a source checkout, else ``pypi`` (the installed release)."""
    return "wheel" if source_root() is not None else "pypi"


def project_version(source: CodeSource) -> str:
    """The version the jobs will install: the checkout's for ``wheel``, the installed one else."""
    root = source_root()
    if source == "wheel":
        if root is None:
            raise DeployError(
                "--code wheel needs a source checkout of rollout-proxy (none found next to "
                f"{Path(__file__).parent}); use --code pypi to install the release instead"
            )
        with (root / "pyproject.toml").open("rb") as handle:
            version: str = tomllib.load(handle)["project"]["version"]
        return version
    return metadata.version(DISTRIBUTION)


def wheel_filename(version: str) -> str:
    """The file name ``pip wheel`` gives a pure-Python build of this project."""
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"


def declared_requirements() -> list[str]:
    """Our dependencies as declared: the checkout's pyproject, else the installed metadata."""
    root = source_root()
    if root is not None:
        with (root / "pyproject.toml").open("rb") as handle:
            declared: list[str] = tomllib.load(handle)["project"]["dependencies"]
        return declared
    return [spec for spec in metadata.requires(DISTRIBUTION) or [] if "extra ==" not in spec]


def replica_requirements() -> tuple[str, ...]:
    """``REPLICA_REQUIREMENTS`` with the version ranges we declare for them."""
    declared = {canonical(_name(spec)): spec for spec in declared_requirements()}
    return tuple(declared.get(canonical(name), name) for name in REPLICA_REQUIREMENTS)


def install_for(source: CodeSource, code_dir: str) -> Install:
    """The ``Install`` for ``source``; ``code_dir`` is where the wheel sits inside every job."""
    if source == "image":
        return Install(source, None)
    version = project_version(source)
    if source == "pypi":
        return Install(source, f"{DISTRIBUTION}=={version}", replica_requirements())
    return Install(source, f"{code_dir}/{wheel_filename(version)}", replica_requirements())
