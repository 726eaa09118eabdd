"""Which checkpoint a (re)started trainer resumes from, and what the dead run left behind.

Checkpoints are HF/TRL's ``checkpoint-<global_step>/`` folders directly in the output directory
(the bucket). HF's trainer writes ``trainer_state.json`` after the model shards and the optimizer
(both collectives: every rank's shard is on disk when rank 0 gets there), and TRL writes
``rollout_state.json`` (dataset position, ``model_version``) before all of it; so a checkpoint is
*complete* when both parse. A half-written one (a job killed mid-save) is never chosen, and is
removed when a resume goes past it so the same step can be saved again cleanly.

At a resume, the adapter versions the dead run published after its checkpoint are removed from
``<output_dir>/.vllm_lora`` before the proxy starts watching it: TRL publishes
``trl-policy-v<model_version + 1>`` next, and the proxy must not pre-load the dead run's copy of
that name (it replaces it in place on replicas that still hold it). The same goes for the
directory TRL saves into on the trainer's disk (``trainer_entry.lora_dir``), whose leftover
mirror snapshots (``.mirror``) go too. Standard library only.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

from trainer_entry.options import Checkpoints

log = logging.getLogger("trainer_entry")

_CHECKPOINT = re.compile(r"checkpoint-([0-9]+)")
_VERSION = re.compile(r"\.?trl-policy-v([0-9]+)(?:\.tmp)?")
LORA_DIR = ".vllm_lora"
MIRROR_SNAPSHOTS = ".mirror"  # proxy.adapters.mirror.SNAPSHOTS (this module imports no proxy)


class ResumeError(ValueError):
    """An explicit ``--resume DIR`` that is not a complete checkpoint."""


def step_of(path: Path) -> int | None:
    match = _CHECKPOINT.fullmatch(path.name)
    return int(match.group(1)) if match else None


def _json(path: Path) -> dict[str, object] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def is_complete(checkpoint: Path) -> bool:
    names = ("trainer_state.json", "rollout_state.json")
    return all(_json(checkpoint / name) is not None for name in names)


def checkpoints(output_dir: Path) -> list[Path]:
    """Every ``checkpoint-N`` folder in ``output_dir``, oldest step first."""
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=lambda p: step_of(p) or 0)


def newest_complete(output_dir: Path) -> Path | None:
    return next((p for p in reversed(checkpoints(output_dir)) if is_complete(p)), None)


def model_version(checkpoint: Path) -> int:
    """The last adapter version the run had published when it saved ``checkpoint``."""
    state = _json(checkpoint / "rollout_state.json") or {}
    value = state.get("model_version", 0)
    return value if isinstance(value, int) else 0


def choose(policy: Checkpoints, output_dir: Path) -> Path | None:
    """The checkpoint to resume from under ``policy.resume`` (None: a fresh start)."""
    if policy.resume == "never":
        return None
    if policy.resume == "auto":
        return newest_complete(output_dir)
    explicit = Path(policy.resume).resolve()
    if not is_complete(explicit):
        raise ResumeError(
            f"--resume {policy.resume}: not a complete checkpoint (trainer_state.json and "
            "rollout_state.json must both be there); use --resume auto for the newest one"
        )
    return explicit


def clear_stale(
    output_dir: Path, resume_from: Path | None, local: Path | None = None
) -> list[Path]:
    """Remove what a dead run left past ``resume_from`` (all of it for a fresh start):
    incomplete checkpoints newer than it, and adapter versions newer than its ``model_version``
    (staging folders included) in the bucket's ``.vllm_lora`` and in ``local``, where TRL saves
    on this machine (with the mirror's snapshots). Returns what was removed."""
    step = step_of(resume_from) if resume_from is not None else -1
    version = model_version(resume_from) if resume_from is not None else 0
    removed = [
        p for p in checkpoints(output_dir) if (step_of(p) or 0) > (step or 0) and not is_complete(p)
    ]
    for lora in (output_dir / LORA_DIR, local):
        if lora is None or not lora.is_dir():
            continue
        for entry in lora.iterdir():
            match = _VERSION.fullmatch(entry.name)
            if (match and int(match.group(1)) > version) or (
                lora == local and entry.name == MIRROR_SNAPSHOTS
            ):
                removed.append(entry)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        log.info("removed %s, left by an earlier run past the resume point", path)
    return removed
