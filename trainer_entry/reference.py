"""The served policy's reference: every adapter version TRL saves carries the probe's logprobs
under the weights it holds, so the proxy can check that each replica serves exactly that policy.

At each save (TRL's module-level ``save_lora_adapter``, which ``_sync_weight_lora`` calls on every
rank and then asks for the load), every rank runs the probe through the model it is about to
save: no grad, eval mode, the packed "tree" forward ``compute_loss`` uses (TRL 1.16 builds the
model with its ``tree_fa3`` attention, which needs packed inputs: ``packing.TreeRow``, one
sample), without the fused head, so the logits go through a float32 log-softmax at temperature 1,
as vLLM's logprobs are; the answer is each cut's top ``K`` of them
(``adapter_receiver.reference``). Under FSDP2 the forward gathers each layer's shards: a
collective, which is why every rank takes part. Then TRL's own save writes the version into a
dot-named staging directory (a dot-name is never a version to the proxy), rank 0 adds
``rollout_probe.json`` and renames the whole into place: the version is never visible without
its reference, and TRL's load, which follows, names a complete directory.

The probe is fixed for the run: the first training prompt, rendered as TRL's rollout worker
renders it (the chat template with the generation prompt), its last ``PROBE_TOKENS`` ids.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from trl.experimental.async_grpo import async_grpo_trainer
from trl.experimental.async_grpo.packing import TreeRow

from adapter_receiver.reference import K, cuts_for, encode
from adapter_receiver.wire import PROBE_FILE

log = logging.getLogger("trainer_entry")

PROBE_TOKENS = 64
STAGING = ".{name}.probed"  # where TRL's save lands before the reference joins it

Save = Callable[[Any, Any, str, str], None]


def probe_ids(
    tokenizer: Any, messages: list[dict[str, Any]], chat_kwargs: dict[str, Any]
) -> list[int]:
    """The probe: ``messages`` (the first training prompt) as TRL's rollout worker sends them,
    its last ``PROBE_TOKENS`` ids."""
    ids = tokenizer.apply_chat_template(
        messages, return_dict=False, add_generation_prompt=True, **chat_kwargs
    )
    return [int(i) for i in ids][-PROBE_TOKENS:]


def answer(
    model: Any, ids: Sequence[int], cuts: Sequence[int], device: torch.device
) -> list[list[float]]:
    """The probe's answer under ``model``: for each cut, the ``K`` largest next-token logprobs
    after ``ids[:cut]``, descending (temperature 1, float32). Every rank of a sharded model must
    call it together."""
    with torch.no_grad():
        logprobs = _next_token_logprobs(model, ids, device)
    return [[float(x) for x in logprobs[cut - 1].topk(K).values.cpu()] for cut in cuts]


def _next_token_logprobs(model: Any, ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Each position's next-token log-distribution, ``(len(ids), vocab)``: one packed forward."""
    row = TreeRow()
    tokens = torch.tensor(list(ids))
    row.add({
        "input_ids": tokens,
        "completion_mask": torch.ones_like(tokens),
        "old_log_probs": torch.zeros(len(ids)),
        "advantage": 0.0,
        "group_id": 0,
    })  # fmt: skip
    packed = row.pack()  # one sample: one segment, its tokens in their own order
    max_q, max_k = packed["tree_max_seqlens"].tolist()
    training = model.training
    model.eval()
    try:
        outputs = model(
            input_ids=packed["input_ids"].unsqueeze(0).to(device),
            position_ids=packed["position_ids"].unsqueeze(0).to(device),
            tree_kv_index=packed["tree_kv_index"].to(device),
            tree_cu_seqlens_q=packed["tree_cu_seqlens_q"].to(device),
            tree_cu_seqlens_k=packed["tree_cu_seqlens_k"].to(device),
            tree_max_seqlen_q=max_q,
            tree_max_seqlen_k=max_k,
            use_cache=False,
        )
    finally:
        model.train(training)
    return torch.log_softmax(outputs.logits[0].float(), dim=-1)


def with_reference(save: Save, ids: Sequence[int]) -> Save:
    """TRL's ``save_lora_adapter``, its version carrying the probe's reference (module doc).
    A probe the model cannot run (every rank fails alike) is said once and the versions are
    saved as TRL saves them: the proxy then checks the replicas by comparison."""
    failed: list[str] = []
    cuts = cuts_for(len(ids))

    def save_lora_adapter(model: Any, accelerator: Any, adapter_name: str, dest_dir: str) -> None:
        if failed:
            return save(model, accelerator, adapter_name, dest_dir)
        try:
            top = answer(model, ids, cuts, accelerator.device)
        except Exception as exc:  # the model's own forward: anything it raises
            failed.append(repr(exc))
            log.warning("the served-policy reference is off for this run (its forward failed: "
                        "%r); the proxy checks replicas by comparison instead", exc)  # fmt: skip
            return save(model, accelerator, adapter_name, dest_dir)
        dest = Path(dest_dir)
        staged = dest.parent / STAGING.format(name=dest.name)
        save(model, accelerator, adapter_name, str(staged))
        if not accelerator.is_main_process:
            return
        (staged / PROBE_FILE).write_bytes(encode(ids, cuts, top))
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(staged, dest)  # atomic within one filesystem, as TRL's own rename is

    save_lora_adapter.__wrapped__ = save  # type: ignore[attr-defined]
    return save_lora_adapter


def install(ids: Sequence[int]) -> None:
    """From now on every adapter TRL saves carries the reference of probe ``ids``."""
    current = async_grpo_trainer.save_lora_adapter
    original = getattr(current, "__wrapped__", current)  # installed once, whatever runs before
    async_grpo_trainer.save_lora_adapter = with_reference(original, list(ids))
    log.info("every adapter version carries the served-policy probe's reference (%d token ids, "
             "%s): the proxy checks each replica against it", len(ids), PROBE_FILE)  # fmt: skip
