"""One rank's training: TRL's AsyncGRPOTrainer with a PEFT LoRA, from ``TrainerOptions``.

Imports torch, TRL, PEFT and datasets (the heavy tier); only ``trainer_entry.rank`` imports it.
Every rank builds the same trainer; TRL itself makes rank 0 the one that talks to the proxy and
runs the rollout worker. Collectives every rank takes part in: the adapter save at each sync
(TRL's, with the served-policy probe's forward before it: ``trainer_entry.reference``), the
sharded checkpoint (HF's), the time-based save decision and the resume point (broadcast from
rank 0 here), and the final adapter. Rank 0, which alone sees TRL's rollout queue, says how far
a step that waits for its samples is (``trainer_entry.progress``), and runs the scaler when the
run's fleet sizes itself (``trainer_entry.scaling``), for as long as it trains.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, load_dataset
from peft import LoraConfig
from transformers import AutoTokenizer, TrainerCallback
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer, async_grpo_trainer

from trainer_entry.cpu_shims import apply_cpu_shims
from trainer_entry.fsdp import fsdp_on_cpu, untie_if_needed
from trainer_entry.lora_dir import redirect
from trainer_entry.options import TrainerOptions
from trainer_entry.progress import Counted, Progress, need, report
from trainer_entry.prompts import conversation
from trainer_entry.proxy_figures import ProxyFigures
from trainer_entry.reference import install as install_reference
from trainer_entry.reference import probe_ids
from trainer_entry.rewards import reward_functions
from trainer_entry.scaling import TrainerSignals
from trainer_entry.scaling import start as start_scaler
from trainer_entry.sync_retry import install as install_sync_retry
from trainer_entry.templates import ensure_response_template

log = logging.getLogger("trainer_entry")

FINAL_ADAPTER = "final_adapter"
RUN_RECORD = "rollout_run.json"


class DatasetError(ValueError):
    """The dataset lacks what the trainer needs; the message names the column or flag."""


def load_prompts(options: TrainerOptions) -> Dataset:
    """The dataset with a conversational ``prompt`` column (and ``answer``, when it has one).

    A path ending in ``.jsonl``/``.json`` or ``.parquet`` is read locally; anything else is a
    Hub dataset id. Each prompt becomes the conversation ``trainer_entry.prompts`` builds: a
    string as ``[system?, user]`` messages, every one with the format instruction.
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
        raise DatasetError(
            f"dataset {options.dataset} has no column {options.prompt_column!r}: name the "
            "prompt column with --prompt-column"
        )
    graded = {"math", "boxed"} & set(options.rewards)
    if graded and "answer" not in dataset.column_names:
        raise DatasetError(
            f"the {'/'.join(sorted(graded))} reward needs an answer column: name it with "
            f"--answer-column (dataset {options.dataset} has {', '.join(dataset.column_names)})"
        )
    system, instruction = options.system_prompt, options.format_instruction
    if isinstance(dataset[0]["prompt"], str) or instruction:
        dataset = dataset.map(
            lambda row: {"prompt": conversation(row["prompt"], system, instruction)}
        )
    return dataset


def build_config(options: TrainerOptions, base_url: str) -> AsyncGRPOConfig:
    recipe, saves = options.recipe, options.checkpoints
    cuda = torch.cuda.is_available()
    return AsyncGRPOConfig(
        output_dir=str(options.output_dir),
        vllm_server_base_url=base_url,
        max_steps=options.max_steps,
        num_generations=recipe.num_generations,
        per_device_train_batch_size=recipe.per_rank_batch,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        max_completion_length=recipe.max_completion_length,
        learning_rate=recipe.learning_rate,
        lr_scheduler_type=recipe.lr_scheduler,
        adam_beta2=recipe.adam_beta2,
        temperature=recipe.temperature,
        max_staleness=recipe.max_staleness,
        weight_sync_steps=recipe.weight_sync_steps,
        max_inflight_tasks=recipe.max_inflight_tasks,
        queue_maxsize=recipe.queue_maxsize,
        token_budget=recipe.token_budget,
        gradient_checkpointing=recipe.gradient_checkpointing,
        vllm_server_timeout=options.server_timeout_s,
        seed=options.seed,
        logging_steps=1,
        report_to=options.report_to,
        save_strategy="steps",
        save_steps=saves.save_steps,
        save_total_limit=saves.save_total_limit,
        # TRL defaults to bf16 mixed precision, which transformers refuses without a GPU.
        bf16=cuda,
        use_cpu=not cuda,
    )


def build_lora(options: TrainerOptions) -> LoraConfig:
    recipe = options.recipe
    modules = list(recipe.lora_target_modules)
    return LoraConfig(
        r=recipe.lora_rank,
        lora_alpha=recipe.alpha,
        target_modules="all-linear" if modules == ["all-linear"] else modules,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )


class _WithProxyFigures(AsyncGRPOTrainer):  # type: ignore[misc]  # TRL is untyped here
    """TRL's trainer, adding the proxy's key figures to every log line (and tracker), and
    showing TRL's figures to the scaler (``TrainerSignals.saw``) when there is one."""

    proxy_figures: ProxyFigures | None = None
    scaler_signals: TrainerSignals | None = None

    def log(self, logs: dict[str, Any], start_time: float | None = None) -> None:
        if self.proxy_figures is not None and self.accelerator.is_main_process:
            logs.update(self.proxy_figures.read())
        if self.scaler_signals is not None:
            self.scaler_signals.saw(logs)
        super().log(logs, start_time)


class StepsEnd(TrainerCallback):  # type: ignore[misc]
    """Tells ``Progress`` where each step ends (``trainer_entry.progress``)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        self.progress.stepped(state.global_step)
        return control


def _watch_samples(
    trainer: Any, options: TrainerOptions
) -> tuple[threading.Event, Progress] | None:
    """Rank 0: a line every ``progress.EVERY_S`` while a step waits for its samples; returns
    the event that stops it and the step's progress (None on the other ranks: they never see
    the queue)."""
    if trainer.rollout_queue is None:
        return None
    recipe = options.recipe
    progress = need(recipe.per_rank_batch, recipe.gradient_accumulation_steps,
                    recipe.token_budget, trainer.accelerator.num_processes)  # fmt: skip
    trainer.rollout_queue = Counted(trainer.rollout_queue, progress)  # read by train()
    trainer.add_callback(StepsEnd(progress))
    stop = threading.Event()
    say = functools.partial(log.info, "%s")
    threading.Thread(target=report, args=(progress, stop, say), daemon=True).start()
    return stop, progress


class SaveByClock(TrainerCallback):  # type: ignore[misc]
    """Also checkpoint once ``minutes`` have passed since the last checkpoint (or the start).
    Rank 0's clock decides and every rank follows (a split decision would hang the collective
    save), so with several ranks each step costs one small broadcast."""

    def __init__(self, minutes: float, accelerator: Any) -> None:
        self.interval_s = minutes * 60.0
        self.accelerator = accelerator
        self.last = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        due = time.monotonic() - self.last >= self.interval_s
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            due = bool(broadcast_object_list([due], from_process=0)[0])
        if due and not control.should_save:
            log.info("checkpoint at step %d: %.0f minutes since the last", state.global_step,
                     self.interval_s / 60)  # fmt: skip
            control.should_save = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        self.last = time.monotonic()
        return control


def run(
    options: TrainerOptions, base_url: str, figures: tuple[str | None, str | None] = (None, None)
) -> dict[str, Any]:
    """Train to the end; returns the final metrics TRL reports (its ``TrainOutput.metrics``).

    ``figures``: where the proxy's figures are read (URL, token); default: ``base_url``."""
    sharded = options.world.world_size > 1
    if apply_cpu_shims():
        log.warning("no CUDA: training in float32 on CPU without bf16 mixed precision")
        if sharded:
            fsdp_on_cpu()
            log.warning("no CUDA: CPU shim applied: accelerate FSDP2 over gloo (instead of DDP)")
    _untie_on_load(sharded)
    tokenizer = AutoTokenizer.from_pretrained(options.model)
    ensure_response_template(tokenizer, options.model, options.response_template)
    trainer = _WithProxyFigures(
        model=options.model,
        reward_funcs=reward_functions(options.rewards, _end_tokens(tokenizer, options.model)),
        args=build_config(options, base_url),
        train_dataset=load_prompts(options),
        processing_class=tokenizer,
        peft_config=build_lora(options),
    )
    accelerator = trainer.accelerator
    if options.probe_reference:
        attest(trainer, tokenizer)
    install_sync_retry(trainer)  # a sync survives a gap of the proxy (TRL sends it once)
    log.info("rank %d of %d: %s", accelerator.process_index, accelerator.num_processes,
             accelerator.distributed_type)  # fmt: skip
    if options.adapters_local is not None:  # None: --adapters-in-bucket (lora_dir.choose)
        saved = redirect(trainer, options.adapters_local)
        if accelerator.is_main_process:
            log.info("TRL saves each adapter version into %s (the proxy mirrors it into the "
                     "bucket's .vllm_lora)", saved)  # fmt: skip
    if options.checkpoints.save_minutes > 0:
        trainer.add_callback(SaveByClock(options.checkpoints.save_minutes, accelerator))
    figures_url, token = figures
    trainer.proxy_figures = ProxyFigures(figures_url or base_url, token)
    resume = _agreed_resume(options, accelerator)
    watching = _watch_samples(trainer, options)
    scaler = None
    if watching is not None:  # rank 0: the scaler, when the fleet sizes itself
        signals = TrainerSignals(watching[1], options.max_steps)
        scaler = start_scaler(os.environ, signals, figures_url or base_url, token)
        trainer.scaler_signals = signals if scaler is not None else None
    try:
        output = trainer.train(resume_from_checkpoint=resume)
    finally:
        if watching is not None:
            watching[0].set()
        if scaler is not None:
            scaler.stop()
    metrics = _finish(trainer, options, output)
    _leave_world(accelerator)
    return metrics


def attest(trainer: Any, tokenizer: Any) -> None:
    """Every adapter version the trainer saves carries the served-policy reference of its first
    prompt (``trainer_entry.reference``)."""
    chat = trainer.args.chat_template_kwargs
    messages = trainer.train_dataset[0]["prompt"]
    install_reference(probe_ids(tokenizer, messages, chat if isinstance(chat, dict) else {}))


def _finish(trainer: Any, options: TrainerOptions, output: Any) -> dict[str, Any]:
    """The final adapter outside ``.vllm_lora`` (TRL prunes that), every rank taking part in
    its gather, and a small run record beside it."""
    final = options.output_dir / FINAL_ADAPTER
    model = trainer.accelerator.unwrap_model(trainer.model)
    async_grpo_trainer.save_lora_adapter(
        model, trainer.accelerator, trainer._adapter_name, str(final)
    )
    metrics: dict[str, Any] = {"global_step": output.global_step, **output.metrics}
    if trainer.accelerator.is_main_process:
        record = {
            "model": options.model,
            "steps": output.global_step,
            "last_version": f"trl-policy-v{trainer.model_version}",
            "world_size": trainer.accelerator.num_processes,
            "metrics": output.metrics,
        }
        (final / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        log.info("training done after %d steps; final adapter in %s", output.global_step, final)
    return metrics


def _leave_world(accelerator: Any) -> None:
    """Every rank leaves the process group together, explicitly: a rank that ended with the
    group still up was seen to abort at interpreter exit (SIGABRT, "terminate called without an
    active exception", from the collective backend's threads) while rank 0 was still writing the
    final adapter, which failed a run that had trained to the end."""
    accelerator.wait_for_everyone()  # a no-op on one rank
    accelerator.end_training()


def _agreed_resume(options: TrainerOptions, accelerator: Any) -> str | None:
    """The launcher's resume point, as rank 0 saw it, on every rank (one bucket mount may lag
    another, and every rank must load the same checkpoint)."""
    choice = str(options.resume_from) if options.resume_from is not None else None
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        choice = broadcast_object_list([choice], from_process=0)[0]
    if choice is not None and accelerator.is_main_process:
        log.info("resuming from %s", choice)
    return choice


def _untie_on_load(sharded: bool) -> None:
    """Untie tied embeddings right after TRL loads the model, when FSDP2 needs it."""
    load = async_grpo_trainer.create_model_from_path

    def create(*args: Any, **kwargs: Any) -> Any:
        model = load(*args, **kwargs)
        untie_if_needed(model, sharded)
        return model

    async_grpo_trainer.create_model_from_path = create


def _end_tokens(tokenizer: Any, model: str) -> list[int]:
    """The tokens that end a completion (TRL's own set: the model's eos ids, the tokenizer's
    eos and pad)."""
    from transformers import GenerationConfig

    ids: list[int] = []
    try:
        eos = GenerationConfig.from_pretrained(model).eos_token_id
    except OSError:
        eos = None
    ids += [eos] if isinstance(eos, int) else list(eos or [])
    ids += [t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None]
    return sorted(set(ids))
