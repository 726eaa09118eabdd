"""vLLM's CPU LoRA ops, made to skip the tokens no adapter applies to (a ``vllm.general_plugins``
entry point: vLLM runs ``apply`` in each of its processes, the engine's included).

vLLM marks a token of a base-model request with the adapter slot ``-1``. Its GPU kernels skip
such tokens; the pure-torch ops of its CPU platform (``vllm.lora.ops.torch_ops``) index the
stacked adapter weights with it, and ``-1`` is the last slot: a base-model request batched with
adapter requests gets the adapter in the last slot applied. Wrong logits, no error (vLLM #48421,
open at 0.32; measured here: 10 of 12 mixed batches answered the base model's probe with the
adapter's values). It matters to a fleet: TRL's rollouts before version 1 ask for the base model
beside other runs' adapters, and the proxy's served-policy probe compares a version's answer with
the base model's.

``apply`` changes nothing unless the platform is vLLM's CPU one and the installed ops alias ``-1``
(checked on a two-slot case), so a fixed vLLM, or a GPU, runs as it is. Each wrapped op leaves a
skipped token's output rows as they were, as the GPU kernels do.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("vllm.rollout_cpu_lora")  # under vLLM's logger: its handler prints it

OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")  # the sgmv_* ops call these
_WRAPPED = "_rollout_skips_no_lora"


def apply() -> None:
    """The plugin: wrap the ops where they alias ``-1`` on the CPU platform; else nothing."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        from vllm.lora.ops import torch_ops
        from vllm.lora.ops.torch_ops import lora_ops
        from vllm.lora.punica_wrapper import punica_cpu
    except ImportError:  # no LoRA support in this build: nothing to fix
        return
    if getattr(lora_ops.bgmv_expand, _WRAPPED, False) or not aliases_last_slot(
        lora_ops.bgmv_expand
    ):
        return
    for name in OPS:
        fixed = skipping_no_lora(getattr(lora_ops, name))
        for module in (lora_ops, torch_ops, punica_cpu):
            setattr(module, name, fixed)
    log.info("LoRA on CPU: base-model tokens skip the adapters (vLLM #48421, fixed here)")


def aliases_last_slot(expand: Callable[..., Any]) -> bool:
    """Whether ``expand`` (``bgmv_expand``) applies the last slot to a token of slot ``-1``."""
    import torch

    weights = torch.tensor([[[1.0]], [[5.0]]])  # two slots, a 1x1 B each
    output = torch.zeros(1, 1)
    expand(torch.ones(1, 1), weights, output, torch.tensor([-1]), add_inputs=True)
    return bool(output.abs().sum() > 0)


def skipping_no_lora(op: Callable[..., Any]) -> Callable[..., Any]:
    """``op`` (inputs, weights, output, indices, ...) with the rows of index ``-1`` left as they
    were: it runs with those indices clamped to a real slot, then their rows are put back."""

    @functools.wraps(op)
    def wrapped(inputs: Any, weights: Any, output: Any, indices: Any, *args: Any, **kw: Any) -> Any:
        rows = min(int(indices.shape[0]), int(output.shape[0]))
        skip = indices[:rows] < 0
        if not bool(skip.any()):
            return op(inputs, weights, output, indices, *args, **kw)
        kept = output[:rows][skip].clone()
        result = op(inputs, weights, output, indices.clamp(min=0), *args, **kw)
        output[:rows][skip] = kept
        return result

    setattr(wrapped, _WRAPPED, True)
    return wrapped
