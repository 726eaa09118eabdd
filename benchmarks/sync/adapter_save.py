"""Suite ``sync --save``: how long saving the published adapter takes on local disk, the save
phase of a weight sync (``--sync-save-s`` in the fleet simulator).

The published adapter (https://huggingface.co/blog/asyncgrpo-lora-hfjobs, its job scripts):
Qwen2.5-Math-1.5B, LoRA r=1 on ``all-linear`` (q, k, v, o, gate, up, down in each of 28 layers),
bf16. Its shapes from the
model's config (hidden 1536, 12 heads and 2 KV heads of 128, MLP 8960): 196 modules x (A, B) =
392 tensors, 2,308,096 bytes. Each repeat saves it as PEFT does (``save_pretrained``: the
weights with ``safetensors.torch.save_file``, then ``adapter_config.json``) into a fresh
directory, and is timed from the first byte to the last file closed (no fsync: PEFT does none).
Needs torch and safetensors (the e2e venv: ``.venv-e2e/bin/python -m benchmarks sync --save``);
without them it says so in one line and measures nothing.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# Qwen2.5-Math-1.5B's config.json and the published LoRA recipe.
LAYERS = 28
HIDDEN = 1536
HEAD_DIM = 128
KV_HEADS = 2
INTERMEDIATE = 8960
RANK = 1
ALPHA = 2
BF16_BYTES = 2
KV = KV_HEADS * HEAD_DIM
# module -> (in features, out features)
MODULES = {
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (HIDDEN, KV),
    "self_attn.v_proj": (HIDDEN, KV),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (HIDDEN, INTERMEDIATE),
    "mlp.up_proj": (HIDDEN, INTERMEDIATE),
    "mlp.down_proj": (INTERMEDIATE, HIDDEN),
}


def adapter_shapes() -> dict[str, tuple[int, int]]:
    """PEFT's key -> shape for the published adapter: lora_A (r, in), lora_B (out, r)."""
    shapes = {}
    for layer in range(LAYERS):
        for module, (fan_in, fan_out) in MODULES.items():
            key = f"base_model.model.model.layers.{layer}.{module}"
            shapes[f"{key}.lora_A.weight"] = (RANK, fan_in)
            shapes[f"{key}.lora_B.weight"] = (fan_out, RANK)
    return shapes


def adapter_bytes() -> int:
    return sum(rows * cols * BF16_BYTES for rows, cols in adapter_shapes().values())


def available() -> bool:
    return all(importlib.util.find_spec(name) for name in ("torch", "safetensors"))


def measure(repeats: int) -> dict[str, Any]:
    """Save the adapter ``repeats`` times; seconds per save (needs ``available()``)."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    tensors = {
        key: torch.randn(shape, generator=generator).to(torch.bfloat16)
        for key, shape in adapter_shapes().items()
    }
    config = {"peft_type": "LORA", "r": RANK, "lora_alpha": ALPHA,
              "target_modules": [m.split(".")[-1] for m in MODULES]}  # fmt: skip
    seconds = []
    with tempfile.TemporaryDirectory(prefix="adapter-save-") as root:
        for n in range(repeats + 1):  # the first is a warm-up (imports, page cache)
            path = Path(root) / f"trl-policy-v{n}"
            started = time.perf_counter()
            path.mkdir()
            save_file(tensors, str(path / "adapter_model.safetensors"))
            (path / "adapter_config.json").write_text(json.dumps(config))
            if n:
                seconds.append(time.perf_counter() - started)
        size = (Path(root) / "trl-policy-v1" / "adapter_model.safetensors").stat().st_size
    return {
        "tensors": len(tensors),
        "tensor_bytes": adapter_bytes(),
        "file_bytes": size,
        "save_s": seconds,
        "p50_save_s": statistics.median(seconds),
        "min_save_s": min(seconds),
        "max_save_s": max(seconds),
    }


def suite(quick: bool) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks sync --save``."""
    if not available():
        return [], "sync --save: skipped, needs torch and safetensors (the e2e venv)"
    row = measure(5 if quick else 20)
    text = (
        f"published adapter: {row['tensors']} tensors, {row['tensor_bytes']:,} bytes bf16 "
        f"({row['file_bytes']:,} on disk); save p50 {row['p50_save_s']:.4f} s "
        f"(min {row['min_save_s']:.4f}, max {row['max_save_s']:.4f}, {len(row['save_s'])} saves)"
    )
    return [row], text
