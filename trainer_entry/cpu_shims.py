"""The two adaptations TRL's AsyncGRPOTrainer needs on a machine without CUDA.

1. Its constructor asks ``torch.cuda.get_device_name`` for the device's peak FLOPs (for MFU
   metrics), which raises without CUDA. Replaced by "peak unknown" (None): TRL then logs that MFU
   is off and reports every other metric.
2. Its packed training forward ("tree" attention) fetches FlashAttention-3's varlen kernel from
   the Hub (``kernels.get_kernel``). Replaced by ``sdpa_varlen``: the same contract computed with
   ``torch.nn.functional.scaled_dot_product_attention``, one segment at a time.

Both are applied only when ``torch.cuda.is_available()`` is false, and each is logged.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger("trainer_entry")


def apply_cpu_shims() -> list[str]:
    """Patch TRL for CPU training when there is no CUDA; returns what was patched."""
    if torch.cuda.is_available():
        return []
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    async_grpo_trainer.get_peak_flops_per_device = _unknown_peak_flops
    packing._flash_attn = _sdpa_kernel
    applied = [
        "trl get_peak_flops_per_device -> None (no CUDA device name to look up)",
        "trl tree attention kernel (flash-attn3 from the Hub) -> torch SDPA varlen",
    ]
    for item in applied:
        log.warning("no CUDA: CPU shim applied: %s", item)
    return applied


def _unknown_peak_flops(_accelerator: Any, _dtype: str) -> None:
    return None


def _sdpa_kernel() -> SimpleNamespace:
    return SimpleNamespace(flash_attn_varlen_func=sdpa_varlen)


def sdpa_varlen(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = True,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float | None = None,
) -> torch.Tensor:
    """FlashAttention's ``flash_attn_varlen_func`` on SDPA.

    ``query`` is ``(total_q, heads, dim)``, ``key``/``value`` ``(total_k, kv_heads, dim)``;
    segment ``s`` is rows ``cu_seqlens_q[s]:cu_seqlens_q[s+1]`` of the queries against rows
    ``cu_seqlens_k[s]:cu_seqlens_k[s+1]`` of the keys. As in FlashAttention, the causal mask is
    aligned to the bottom right (query ``i`` of ``Lq`` sees key ``j`` of ``Lk`` iff
    ``j <= i + Lk - Lq``) and a left window ``w`` also hides keys before ``i + Lk - Lq - w``.
    Grouped-query heads are repeated. Cost: one SDPA call per segment, O(Lq x Lk) each.
    """
    del max_seqlen_q, max_seqlen_k  # only sizes FlashAttention's launch grid
    if softcap:
        # Models with attention logit soft-capping (Gemma 2) need the real kernel.
        raise ValueError(
            "attention softcap is not supported by the CPU SDPA shim: train this model on a GPU"
        )
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads:
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    outputs = []
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for s in range(len(bounds_q) - 1):
        q = query[bounds_q[s] : bounds_q[s + 1]].transpose(0, 1)
        k = key[bounds_k[s] : bounds_k[s + 1]].transpose(0, 1)
        v = value[bounds_k[s] : bounds_k[s + 1]].transpose(0, 1)
        mask = _mask(q.shape[1], k.shape[1], causal, window_size[0], q.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=softmax_scale)
        outputs.append(out.transpose(0, 1))
    return torch.cat(outputs, dim=0)


def _mask(
    len_q: int, len_k: int, causal: bool, left: int, device: torch.device
) -> torch.Tensor | None:
    if not causal and left < 0:
        return None
    offset = len_k - len_q
    rows = torch.arange(len_q, device=device).unsqueeze(1) + offset
    cols = torch.arange(len_k, device=device).unsqueeze(0)
    allowed = torch.ones(len_q, len_k, dtype=torch.bool, device=device)
    if causal:
        allowed &= cols <= rows
    if left >= 0:
        allowed &= cols >= rows - left
    return allowed
