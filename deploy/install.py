"""How a job gets this project's code on top of a stock image.

Three sources, chosen with ``--code``:

- ``wheel`` (the default): ``deploy up`` builds the wheel from the source tree, or packs the
  installed package again without one (``deploy.wheel``), and uploads it into the run's folder
  of the bucket; every job mounts the bucket, so it installs ``/lora/<run>/code/<wheel>``.
- ``pypi``: the jobs install ``rollout-proxy==<version>`` from PyPI, which works only for a
  version published there (an explicit choice: none is yet).
- ``image``: the image already holds the project (see ``deploy/Dockerfile``): nothing to install.

The job command becomes ``sh -c "python3 -m pip install ... && exec <entry point>"`` so the entry
point replaces the shell and receives the job's SIGTERM on cancel. An argument that names a
variable only the job has (``Expanded``: ``${HF_NETWORK_GROUP_PREFIX}replica``, the network
group's alias) is written in double quotes, so that shell expands it; every other one in single
quotes, so none does.

Replica and trainer jobs run on the vLLM image, whose packages vLLM was built and tested with
(the trainer needs vLLM too: TRL's rollout worker refuses to start without it): installing our
wheel with its dependencies there would upgrade some of them (our version floors come along) and
can break vLLM's imports. So such a job installs the wheel with ``--no-deps``, then only what its
entry point imports (``REPLICA_REQUIREMENTS``, or every dependency of ours plus the trainer's:
``trainer_requirements``) under a constraints file written from the image's own ``pip list``: a
package the image has stays at its version, a missing one is added (with its own dependencies,
constrained the same way); an image whose version is below our floor fails the job at start-up
with pip's conflict message, instead of breaking vLLM (or our imports) later. Last, the job
the trainer imports what it cannot run without (``vllm``, TRL's ``kernels``), so an image that
lacks one fails in seconds with a line naming the flag to change.

The trainer installs the TRL this project's real tier tests (``TESTED_TRL``, with its
``kernels`` extra: on CUDA TRL's packed forward loads its FA3 kernel through it).
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

CodeSource = Literal["wheel", "pypi", "image"]
DISTRIBUTION = "rollout-proxy"
PIP_INSTALL = ("python3", "-m", "pip", "install", "--no-cache-dir", "--quiet")
IMAGE_CONSTRAINTS = "/tmp/image-packages.txt"
IMAGE_CONFLICT = (
    "rollout-proxy: the packages of this image are older than this job needs (see the pip "
    "conflict above; none was changed): use a newer image (--replica-image, --trainer-image)"
)
# The third-party distributions ``python -m replica_entry`` imports (tests check the list).
REPLICA_REQUIREMENTS = ("aiohttp", "orjson", "prometheus-client", "pydantic", "xxhash")
# The TRL the e2e tier runs (pyproject's e2e-cpu pin; a test keeps them equal): its async GRPO
# trainer is experimental, so a job installs exactly the tested release.
TESTED_TRL = "1.16.0"
TRAINER_PINS = (f"trl[kernels]=={TESTED_TRL}",)
# The vLLM this project's real tier runs (pyproject's e2e-cpu pin; a test keeps them equal).
TESTED_VLLM = "0.32.0"
VLLM_IMAGE = f"vllm/vllm-openai:v{TESTED_VLLM}"
# What the trainer's image must import once installed: (module, why, what to do).
TRAINER_IMPORTS = (
    (
        "vllm",
        "TRL's rollout worker refuses to start without it",
        f"use the vLLM image (--trainer-image {VLLM_IMAGE}) or one built on it",
    ),
    (
        "kernels",
        "TRL's packed forward loads its FA3 kernel through it on CUDA",
        "see pip's output above; trl[kernels] installs it",
    ),
)


class Expanded(str):
    """An argument the job's shell expands: literal text and ``${NAME}`` references only."""

    __slots__ = ()

    def __new__(cls, text: str) -> Expanded:
        if not _EXPANDABLE.fullmatch(text):
            raise ValueError(f"not literal text with ${{NAME}} references: {text!r}")
        return super().__new__(cls, text)


_EXPANDABLE = re.compile(r"(?:[A-Za-z0-9_.:/@=,+-]|\$\{[A-Z_][A-Z0-9_]*\})+")


def shell_join(argv: Sequence[str]) -> str:
    """``argv`` as one shell command line: ``Expanded`` words in double quotes, others quoted."""
    return " ".join(
        f'"{word}"' if isinstance(word, Expanded) else shlex.quote(word) for word in argv
    )


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
    trainer_requirements: tuple[str, ...] = ()

    def wrap(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The job command running ``argv`` after installing the project with its dependencies
        (a plain Python image: the proxy job)."""
        if self.requirement is None:
            return _direct(argv)
        script = f"{shlex.join([*PIP_INSTALL, self.requirement])} && exec {shell_join(argv)}"
        return ("sh", "-c", script)

    def wrap_into_image(self, argv: Sequence[str], role: str = "replica") -> tuple[str, ...]:
        """The job command running ``argv`` after an install that changes no package the image
        ships, then a check of what ``role`` must import (see the module docstring)."""
        checks = [
            f"(python3 -c {shlex.quote(f'import {module}')} || (echo "
            f"{shlex.quote(f'rollout-proxy: this image cannot import {module} ({why}): {fix}')} "
            ">&2; exit 1))"
            for module, why, fix in (TRAINER_IMPORTS if role == "trainer" else ())
        ]
        if self.requirement is None:
            if not checks:
                return _direct(argv)
            return ("sh", "-c", " && ".join([*checks, f"exec {shell_join(argv)}"]))
        needs = self.trainer_requirements if role == "trainer" else self.replica_requirements
        install = shlex.join([*PIP_INSTALL, "-c", IMAGE_CONSTRAINTS, *needs])
        steps = [
            f"python3 -m pip list --format=freeze > {IMAGE_CONSTRAINTS}",
            shlex.join([*PIP_INSTALL, "--no-deps", self.requirement]),
            f"({install} || (echo {shlex.quote(IMAGE_CONFLICT)} >&2; exit 1))",
            *checks,
            f"exec {shell_join(argv)}",
        ]
        return ("sh", "-c", " && ".join(steps))


def _direct(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` as the job's command: as is, or through a shell when a word needs expanding."""
    if any(isinstance(word, Expanded) for word in argv):
        return ("sh", "-c", f"exec {shell_join(argv)}")
    return tuple(argv)


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
    """``wheel``: from the source checkout, else from the installed package (``deploy.wheel``).
    Never ``pypi`` unasked: it works only for a version published there."""
    return "wheel"


def project_version(source: CodeSource) -> str:
    """The version the jobs will install: the checkout's for ``wheel`` from one, the installed
    one else."""
    root = source_root()
    if source == "wheel" and root is not None:
        with (root / "pyproject.toml").open("rb") as handle:
            version: str = tomllib.load(handle)["project"]["version"]
        return version
    return metadata.version(DISTRIBUTION)


def wheel_filename(version: str) -> str:
    """The file name ``pip wheel`` gives a pure-Python build of this project."""
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-py3-none-any.whl"


def _pyproject() -> dict[str, Any] | None:
    root = source_root()
    if root is None:
        return None
    with (root / "pyproject.toml").open("rb") as handle:
        project: dict[str, Any] = tomllib.load(handle)["project"]
    return project


def declared_requirements(extra: str | None = None) -> list[str]:
    """Our dependencies as declared (``extra``: that extra's alone): the checkout's pyproject,
    else the installed metadata."""
    project = _pyproject()
    if project is not None:
        declared: list[str] = (
            project["dependencies"] if extra is None else project["optional-dependencies"][extra]
        )
        return declared
    marker = re.compile(r"""\s*;\s*extra\s*==\s*['"]([^'"]+)['"]\s*$""")
    chosen = []
    for spec in metadata.requires(DISTRIBUTION) or []:
        found = marker.search(spec)
        if (found.group(1) if found else None) == extra:
            chosen.append(spec[: found.start()] if found else spec)
    return chosen


def replica_requirements() -> tuple[str, ...]:
    """``REPLICA_REQUIREMENTS`` with the version ranges we declare for them."""
    declared = {canonical(_name(spec)): spec for spec in declared_requirements()}
    return tuple(declared.get(canonical(name), name) for name in REPLICA_REQUIREMENTS)


def trainer_requirements() -> tuple[str, ...]:
    """Everything the trainer job imports: our dependencies (the sidecar proxy runs there too)
    and the trainer extra's, TRL pinned to the tested release (``TRAINER_PINS``)."""
    pinned = {canonical(_name(spec)) for spec in TRAINER_PINS}
    extra = [
        spec for spec in declared_requirements("trainer") if canonical(_name(spec)) not in pinned
    ]
    return (*declared_requirements(), *extra, *TRAINER_PINS)


def install_for(source: CodeSource, code_dir: str) -> Install:
    """The ``Install`` for ``source``; ``code_dir`` is where the wheel sits inside every job."""
    if source == "image":
        return Install(source, None)
    version = project_version(source)
    requirement = (
        f"{DISTRIBUTION}=={version}"
        if source == "pypi"
        else f"{code_dir}/{wheel_filename(version)}"
    )
    return Install(source, requirement, replica_requirements(), trainer_requirements())
