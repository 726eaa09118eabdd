"""Where TRL saves the adapter at each sync: the trainer machine's own disk, not the bucket.

TRL 1.16 fixes the directory in ``AsyncGRPOTrainer.__init__``
(``trl/experimental/async_grpo/async_grpo_trainer.py``, line 1309)::

    self._lora_dir = os.path.abspath(os.path.join(self.args.output_dir, ".vllm_lora"))

and reads it only in ``_sync_weight_lora``, at every sync after construction: line 1820
(``adapter_dir = os.path.join(self._lora_dir, f"{self._lora_name}-v{version}")``: where
``save_lora_adapter`` stages ``.<name>.tmp`` and renames it into place, and the path TRL's load
names) and line 1854 (the ``shutil.rmtree`` of the version before the one it unloads). The one
other read, line 1415, is a log line inside ``__init__``. So setting the attribute on the built
trainer moves every save, load and delete, and leaves ``output_dir`` (checkpoints,
``rollout_state.json``) in the bucket. Only the main process writes there
(``save_lora_adapter`` returns on the others before touching a file, line 823; the delete is
under ``is_main_process``, line 1842): the directory needs to exist on node 0 only.

Why this and not the alternatives: TRL has no setting for it; a symlink ``.vllm_lora`` in the
bucket would point the replicas' mounts at a path that exists on the trainer alone (and bucket
mounts need not keep symlinks); a local ``output_dir`` would take the checkpoints off the bucket.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

ATTRIBUTE = "_lora_dir"
FRESH_PREFIX = "rollout-trainer-adapters-"


class LoraDirMissing(RuntimeError):
    """The installed TRL's trainer has no ``_lora_dir`` to redirect (the message says why)."""


def redirect(trainer: Any, directory: Path) -> str:
    """Make ``trainer`` (a built ``AsyncGRPOTrainer``) save each adapter version into
    ``directory`` (absolute, as TRL's own is: the load names it to the proxy); returns it."""
    current = getattr(trainer, ATTRIBUTE, None)
    if not isinstance(current, str):
        raise LoraDirMissing(
            f"this TRL's {type(trainer).__name__} has no {ATTRIBUTE} attribute (TRL 1.16's "
            "AsyncGRPOTrainer has): adapters cannot be saved on local disk; install trl 1.16 or "
            "pass --adapters-in-bucket"
        )
    path = os.path.abspath(directory)
    setattr(trainer, ATTRIBUTE, path)
    return path


def choose(requested: Path | None, in_bucket: bool) -> tuple[Path | None, bool]:
    """Node 0's launcher: where TRL saves (None: the bucket, ``--adapters-in-bucket``), and
    whether the directory is fresh (made here, in the machine's temp directory, when
    ``--adapters-local`` names none; removed after the run). The directory exists on return."""
    if in_bucket:
        return None, False
    if requested is None:
        return Path(tempfile.mkdtemp(prefix=FRESH_PREFIX)), True
    path = Path(os.path.abspath(requested))
    path.mkdir(parents=True, exist_ok=True)
    return path, False
