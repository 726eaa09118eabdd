"""One rank of the trainer: ``python -m trainer_entry.rank``, started by the trainer command.

It reads its ``TrainerOptions`` from ``OPTIONS_ENV`` (the launcher decided everything: ranks,
recipe, resume point) and trains. Importing this module ties the process to the launcher
(``trainer_entry.lifeline``); TRL's rollout worker, a ``spawn`` child of rank 0, imports it too
and so ends with the launcher as well.

Exit codes: 0 trained; 2 bad input (a dataset or template the trainer cannot use, a TRL whose
trainer cannot save adapters locally: one line says what to pass); 3 out of GPU memory (one
line says which knob to turn).
"""

from __future__ import annotations

import logging
import os
import sys

from trainer_entry.lifeline import watch_launcher

watch_launcher()  # at import: the spawned rollout worker runs this too (module docstring)

log = logging.getLogger("trainer_entry")

OUT_OF_MEMORY_HINT = (
    "out of GPU memory at --token-budget {budget} tokens per rank: lower --token-budget (e.g. "
    "{half}), turn on --gradient-checkpointing, shorten --max-completion-length, or use a flavor "
    "with more GPU memory"
)


def main() -> int:
    from trainer_entry.launch import EXIT_BAD_INPUT, EXIT_OUT_OF_MEMORY, rank_env
    from trainer_entry.lora_dir import LoraDirMissing
    from trainer_entry.options import OPTIONS_ENV, TrainerOptions
    from trainer_entry.rewards import RewardError
    from trainer_entry.templates import TemplateError

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = TrainerOptions.from_json(os.environ[OPTIONS_ENV])
    base_url, figures = rank_env(os.environ)
    import torch

    from trainer_entry.train import DatasetError, run

    try:
        metrics = run(options, base_url, figures)
    except torch.OutOfMemoryError:
        budget = options.recipe.token_budget
        log.error(OUT_OF_MEMORY_HINT.format(budget=budget, half=max(budget // 2, 1024)))
        return EXIT_OUT_OF_MEMORY
    except (TemplateError, DatasetError, RewardError, LoraDirMissing) as exc:
        log.error("%s", exc)
        return EXIT_BAD_INPUT
    if os.environ.get("RANK", "0") == "0":
        print(f"training finished: {metrics}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
