"""Adapter directories as TRL writes them (config + weights), for load tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_adapter(root: Path, name: str, rank: int = 1) -> Path:
    """Create ``root/name`` holding a minimal PEFT LoRA adapter; return its absolute path."""
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": ["q_proj", "v_proj"],
        "base_model_name_or_path": "sim-model",
        "task_type": "CAUSAL_LM",
    }
    (path / "adapter_config.json").write_text(json.dumps(config))
    (path / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    return path.resolve()
