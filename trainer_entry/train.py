"""Build TRL's AsyncGRPOTrainer with a PEFT LoRA from ``TrainerOptions`` and run it.

Imports torch, TRL, PEFT and datasets (the heavy tier); ``trainer_entry.cli`` imports this module
only once the command line is valid and the proxy is up.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, load_dataset
from peft import LoraConfig
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

from trainer_entry.cpu_shims import apply_cpu_shims
from trainer_entry.options import TrainerOptions
from trainer_entry.proxy_figures import ProxyFigures
from trainer_entry.rewards import REWARDS

log = logging.getLogger("trainer_entry")


def load_prompts(options: TrainerOptions) -> Dataset:
    """The dataset with a conversational ``prompt`` column (and ``answer``, when it has one).

    A path ending in ``.jsonl``/``.json`` or ``.parquet`` is read locally; anything else is a
    Hub dataset id. A string prompt column becomes ``[system?, user]`` messages.
    """
    source = Path(options.dataset)
    if source.suffix in (".jsonl", ".json"):
        lines = source.read_text().splitlines()
        dataset = Dataset.from_list([json.loads(line) for line in lines if line.strip()])
    elif source.suffix == ".parquet":
        dataset = Dataset.from_parquet(str(source))
    else:
        loaded = load_dataset(options.dataset, options.dataset_config, split=options.dataset_split)
        assert isinstance(loaded, Dataset)
        dataset = loaded
    for column, wanted in ((options.prompt_column, "prompt"), (options.answer_column, "answer")):
        if column != wanted and column in dataset.column_names:
            if wanted in dataset.column_names:
                dataset = dataset.remove_columns(wanted)
            dataset = dataset.rename_column(column, wanted)
    if "prompt" not in dataset.column_names:
        raise ValueError(f"dataset {options.dataset} has no column {options.prompt_column!r}")
    if "math" in options.rewards and "answer" not in dataset.column_names:
        raise ValueError(f"the math reward needs an answer column ({options.answer_column!r})")
    if isinstance(dataset[0]["prompt"], str):
        dataset = dataset.map(lambda row: {"prompt": _messages(row["prompt"], options)})
    return dataset


def build_config(options: TrainerOptions, base_url: str) -> AsyncGRPOConfig:
    save: dict[str, Any] = (
        {"save_strategy": "steps", "save_steps": options.save_steps}
        if options.save_steps
        else {"save_strategy": "no"}
    )
    return AsyncGRPOConfig(
        output_dir=str(options.output_dir),
        vllm_server_base_url=base_url,
        max_steps=options.max_steps,
        num_generations=options.num_generations,
        per_device_train_batch_size=options.batch_size or options.num_generations,
        max_completion_length=options.max_completion_length,
        learning_rate=options.learning_rate,
        temperature=options.temperature,
        max_staleness=options.max_staleness,
        weight_sync_steps=options.weight_sync_steps,
        max_inflight_tasks=options.max_inflight_tasks,
        token_budget=options.token_budget,
        gradient_checkpointing=options.gradient_checkpointing,
        vllm_server_timeout=options.server_timeout_s,
        seed=options.seed,
        logging_steps=1,
        report_to=options.report_to,
        # TRL defaults to bf16 mixed precision, which transformers refuses without a GPU.
        bf16=torch.cuda.is_available(),
        **save,
    )


def build_lora(options: TrainerOptions) -> LoraConfig:
    return LoraConfig(
        r=options.lora_rank,
        lora_alpha=options.lora_alpha if options.lora_alpha is not None else 2 * options.lora_rank,
        target_modules=list(options.lora_target_modules),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )


class _WithProxyFigures(AsyncGRPOTrainer):  # type: ignore[misc]  # TRL is untyped here
    """TRL's trainer, adding the proxy's key figures to every log line (and tracker)."""

    proxy_figures: ProxyFigures | None = None

    def log(self, logs: dict[str, Any], start_time: float | None = None) -> None:
        if self.proxy_figures is not None and self.accelerator.is_main_process:
            logs.update(self.proxy_figures.read())
        super().log(logs, start_time)


def run(
    options: TrainerOptions, base_url: str, figures: tuple[str | None, str | None] = (None, None)
) -> dict[str, Any]:
    """Train to the end; returns the final metrics TRL reports (its ``TrainOutput.metrics``).

    ``figures``: where the proxy's figures are read (URL, token); default: ``base_url``."""
    if apply_cpu_shims():
        log.warning("no CUDA: training in float32 on CPU without bf16 mixed precision")
    trainer = _WithProxyFigures(
        model=options.model,
        reward_funcs=[REWARDS[name] for name in options.rewards],
        args=build_config(options, base_url),
        train_dataset=load_prompts(options),
        peft_config=build_lora(options),
    )
    figures_url, token = figures
    trainer.proxy_figures = ProxyFigures(figures_url or base_url, token)
    resume: str | bool | None = options.resume
    if resume == "latest":
        resume = True
    output = trainer.train(resume_from_checkpoint=resume)
    final = options.output_dir / "final_adapter"
    trainer.save_model(str(final))
    log.info("training done after %d steps; adapter saved to %s", output.global_step, final)
    metrics: dict[str, Any] = {"global_step": output.global_step, **output.metrics}
    return metrics


def _messages(text: str, options: TrainerOptions) -> list[dict[str, str]]:
    system = [{"role": "system", "content": options.system_prompt}] if options.system_prompt else []
    return [*system, {"role": "user", "content": text}]
