"""FSDP2 details the trainer takes care of: tied embeddings, and FSDP2 on CPU ranks.

Tied embeddings. Qwen2.5-Math-1.5B (and many small models) tie ``lm_head`` to ``embed_tokens``:
one parameter used by two modules. FSDP2 cannot place one parameter in two shard groups, and
accelerate before 1.15 wrapped ``embed_tokens`` alone and left ``lm_head`` to the root unit (1.14
moved the embedding into the tail unit but still left ``lm_head`` in the root), so
``accelerator.prepare`` fails ("shared with a parameter already managed by another FSDP group").
Since 1.15 accelerate puts both modules in one unit. With an older accelerate, ``untie`` gives
``lm_head`` its own copy of the weight before FSDP2 sees the model: LoRA trains neither, and
vLLM serves the base model as published, so nothing the replicas see changes. It costs one
more vocabulary x hidden matrix of memory (466 MB in bf16 for Qwen2.5-Math-1.5B), which is why
it is done only when needed, and logged.

CPU ranks. accelerate maps a multi-process CPU start to DDP (``MULTI_CPU``) and never to FSDP
(its FSDP upgrade applies to GPU-like types only). ``fsdp_on_cpu`` makes an ``AcceleratorState``
built with an FSDP plugin on CPU ranks take the FSDP type, so ``prepare`` shards with FSDP2 over
gloo and HF's trainer saves and loads sharded checkpoints, exactly the GPU path's structure.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("trainer_entry")

GROUPS_TIED_WEIGHTS_SINCE = "1.15.0"  # accelerate: embed_tokens and lm_head in one FSDP2 unit


def tied(model: Any) -> bool:
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    return embed is not None and head is not None and embed.weight is head.weight


def accelerate_groups_tied_weights(version: str | None = None) -> bool:
    """Whether this accelerate's FSDP2 preparation keeps a tied pair in one unit."""
    from packaging.version import Version

    if version is None:
        import accelerate

        version = accelerate.__version__
    return Version(version) >= Version(GROUPS_TIED_WEIGHTS_SINCE)


def untie(model: Any) -> None:
    """Give the output embedding its own copy of the tied weight (values unchanged)."""
    import torch

    head = model.get_output_embeddings()
    head.weight = torch.nn.Parameter(
        model.get_input_embeddings().weight.detach().clone(),
        requires_grad=head.weight.requires_grad,
    )
    for config in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        config.tie_word_embeddings = False


def untie_if_needed(model: Any, sharded: bool) -> bool:
    """``untie`` when FSDP2 shards ``model`` and this accelerate cannot keep the pair in one
    unit; returns whether it did (and says so)."""
    if not (sharded and tied(model) and not accelerate_groups_tied_weights()):
        return False
    untie(model)
    log.warning(
        "the model ties lm_head to embed_tokens, which this accelerate's FSDP2 cannot shard "
        "(accelerate < %s): lm_head gets its own copy of the weight (LoRA trains neither)",
        GROUPS_TIED_WEIGHTS_SINCE,
    )
    return True


def fsdp_on_cpu() -> None:
    """Let an FSDP plugin on CPU ranks select FSDP instead of DDP (module docstring)."""
    import accelerate.state as state
    from accelerate.utils import DistributedType

    original = state.AcceleratorState.__init__
    if getattr(original, "_rollout_fsdp_on_cpu", False):
        return

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        plugin = kwargs.get("fsdp_plugin")
        if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = plugin

    init._rollout_fsdp_on_cpu = True  # type: ignore[attr-defined]
    state.AcceleratorState.__init__ = init
