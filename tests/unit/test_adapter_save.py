"""``python -m benchmarks sync --save``: the published adapter's shapes, and a skip in one line
where torch is not installed (the core venv)."""

from __future__ import annotations

import pytest

from benchmarks.sync import adapter_save


def test_the_published_adapter_is_392_tensors_of_2308096_bytes() -> None:
    shapes = adapter_save.adapter_shapes()
    assert len(shapes) == 392  # 28 layers x 7 modules x (A, B)
    assert adapter_save.adapter_bytes() == 2_308_096
    assert shapes["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"] == (256, 1)
    assert shapes["base_model.model.model.layers.27.mlp.down_proj.lora_A.weight"] == (1, 8960)


def test_without_torch_it_skips_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter_save, "available", lambda: False)
    rows, text = adapter_save.suite(quick=True)
    assert rows == [] and "skipped" in text and "\n" not in text
